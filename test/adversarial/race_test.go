package adversarial

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// races counts launches made while a path was being swapped, for the report.
var races atomic.Int64

// raceLaunches is how many launches each race makes (4 races × 2 backends × 25 = 200
// launches in CI); AGENTBOX_RACE_LAUNCHES raises it.
func raceLaunches() int {
	if n, err := strconv.Atoi(os.Getenv("AGENTBOX_RACE_LAUNCHES")); err == nil && n > 0 {
		return n
	}
	return 25
}

// setupRace is one swap raced against launches: real is the path as the launcher
// should see it, decoy a symlink to a host place outside the intended target; the
// flipper exchanges the two names without pause.
type setupRace struct {
	name string
	// writerOwnsGitPaths: the racing process, outside the sandbox, can write the
	// protected Git paths itself. When it replaces one during a session (rename over
	// it), the kernel detaches the sandbox's read-only mount from the replaced file
	// (mounts on a dentry unlinked or renamed over in another namespace are
	// dropped), so what it swaps in is writable inside; it could as well write its
	// payload directly. Such rows check what setup must guarantee — no mount and no
	// file outside the target, markers only in the repository — not P7, which
	// cannot hold against a writer agentbox does not confine.
	writerOwnsGitPaths bool
	// twin: the decoy is a real directory, not a symlink: a second repository
	// exchanged with the first, and a session may run in either (its markers land
	// in the one it got).
	twin bool
	// prepare makes real and decoy and returns them, the --repo to launch with, and
	// the extra args.
	prepare func(t *testing.T, x *target) (real, decoy, repo string, args []string)
}

var setupRaces = []setupRace{
	{name: "repo path component", prepare: func(t *testing.T, x *target) (string, string, string, []string) {
		// HOME/proj/repo is the repository; HOME/proj flips with a symlink to a host
		// directory whose repo entry leads to HOME itself, which the rules refuse
		// (P6). A launch that checked one resolution and mounted another would make
		// HOME writable: markers would land in HOME, not in the repository.
		real := filepath.Join(x.Home, "proj")
		mkUserDir(t, real)
		if err := os.Rename(x.Repo, filepath.Join(real, "repo")); err != nil {
			t.Fatal(err)
		}
		mustSymlink(t, x.Home, filepath.Join(x.Outside, "repo"))
		testenv.Chown(t, x.Outside)
		decoy := filepath.Join(x.Home, "proj-decoy")
		mustSymlink(t, x.Outside, decoy)
		return real, decoy, filepath.Join(real, "repo"), nil
	}},
	{name: "repo exchanged with a real twin", twin: true, prepare: func(t *testing.T, x *target) (string, string, string, []string) {
		// HOME/proj/repo is the repository; HOME/proj-twin/repo another, with its own
		// .git. The flipper exchanges HOME/proj and HOME/proj-twin, two real
		// directories: no symlink for the launcher's checks to see. A launch that
		// bound the repository from one and the protected Git paths from the other
		// would leave the bound one's .git/config and hooks writable.
		real := filepath.Join(x.Home, "proj")
		mkUserDir(t, real)
		if err := os.Rename(x.Repo, filepath.Join(real, "repo")); err != nil {
			t.Fatal(err)
		}
		twin := filepath.Join(x.Home, "proj-twin")
		mkUserDir(t, filepath.Join(twin, "repo/.git/hooks"))
		sandboxtest.WriteFile(t, filepath.Join(twin, "repo/.git/config"), "[core]\n\trepositoryformatversion = 0\n")
		sandboxtest.WriteFile(t, filepath.Join(twin, "repo/.git/HEAD"), "ref: refs/heads/main\n")
		sandboxtest.WriteFile(t, filepath.Join(twin, "repo/.git/hooks/post-commit.sample"), "#!/bin/sh\n")
		testenv.Chown(t, x.Home)
		return real, twin, filepath.Join(real, "repo"), nil
	}},
	{name: ".git hooks", writerOwnsGitPaths: true, prepare: func(t *testing.T, x *target) (string, string, string, []string) {
		mkUserDir(t, filepath.Join(x.Outside, "hooks"))
		decoy := filepath.Join(x.Repo, ".git/hooks-decoy")
		mustSymlink(t, filepath.Join(x.Outside, "hooks"), decoy)
		return filepath.Join(x.Repo, ".git/hooks"), decoy, x.Repo, nil
	}},
	{name: ".git config", writerOwnsGitPaths: true, prepare: func(t *testing.T, x *target) (string, string, string, []string) {
		decoy := filepath.Join(x.Repo, ".git/config-decoy")
		mustSymlink(t, x.Victim, decoy)
		return filepath.Join(x.Repo, ".git/config"), decoy, x.Repo, nil
	}},
	{name: "HOME subpath .ssh with --disk-tmp", prepare: func(t *testing.T, x *target) (string, string, string, []string) {
		real := filepath.Join(x.Home, ".ssh")
		mkUserDir(t, real)
		sandboxtest.WriteFile(t, filepath.Join(real, "authorized_keys"), "key\n")
		mkUserDir(t, filepath.Join(x.Outside, "ssh"))
		decoy := filepath.Join(x.Home, ".ssh-decoy")
		mustSymlink(t, filepath.Join(x.Outside, "ssh"), decoy)
		testenv.Chown(t, x.Home)
		return real, decoy, x.Repo, []string{"--disk-tmp"}
	}},
	{name: "kept path ~/.claude", prepare: func(t *testing.T, x *target) (string, string, string, []string) {
		// --keep-agent claude binds HOME/.claude writable; the flipper exchanges it
		// with a symlink to a host directory outside HOME. A launch that checked the
		// real directory and bound what the symlink leads to would let the session
		// write outside (the script writes HOME/.claude/kept-N).
		real := filepath.Join(x.Home, ".claude")
		mkUserDir(t, real)
		sandboxtest.WriteFile(t, filepath.Join(x.Home, ".claude.json"), "{}\n")
		mkUserDir(t, filepath.Join(x.Outside, "claude"))
		decoy := filepath.Join(x.Home, ".claude-decoy")
		mustSymlink(t, filepath.Join(x.Outside, "claude"), decoy)
		testenv.Chown(t, x.Home)
		return real, decoy, x.Repo, []string{"--keep-agent", "claude"}
	}},
	{name: "added directory", prepare: func(t *testing.T, x *target) (string, string, string, []string) {
		// --add-dir HOME/extra binds it writable; the flipper exchanges it with a
		// symlink to HOME, which the rules refuse as an added directory (P6). (A
		// symlink to an acceptable directory is taken as the directory it names, as
		// for the repository.) A launch that checked the real directory and bound
		// what the symlink leads to would make HOME writable: the script's
		// $ADDDIR/added-N would land in HOME.
		real := filepath.Join(x.Home, "extra")
		mkUserDir(t, real)
		decoy := filepath.Join(x.Home, "extra-decoy")
		mustSymlink(t, x.Home, decoy)
		testenv.Chown(t, x.Home)
		return real, decoy, x.Repo, []string{"--add-dir", real}
	}},
}

// raceScript runs in the repository the launcher resolved (its working directory):
// it writes a marker there, then tries the protected Git paths with a payload that
// the operator's Git would run, and writes to HOME and /tmp (both disposable).
const raceScript = `echo "$N" > "marker-$N" && echo MARKED
printf '[core]\n\tfsmonitor = touch %s/fsmonitor-%s\n' "$PWNED" "$N" >> .git/config 2>/dev/null && echo WROTE-CONFIG
printf '#!/bin/sh\ntouch %s/hook-%s\n' "$PWNED" "$N" > .git/hooks/pre-commit 2>/dev/null && chmod +x .git/hooks/pre-commit && echo WROTE-HOOK
touch "$HOME/.ssh/marker-$N" /tmp/marker-$N 2>/dev/null
touch "$HOME/.claude/kept-$N" 2>/dev/null
[ -z "$ADDDIR" ] || touch "$ADDDIR/added-$N" 2>/dev/null
true`

// TestSetupRaces launches again and again while a flipper swaps a path the setup
// resolves. A launch may be refused (125, one line) but never mounts outside the
// intended target: every marker a successful session wrote is in the real
// repository, the protected Git paths stay read-only, nothing outside changes.
func TestSetupRaces(t *testing.T) {
	pr := probe(t)
	n := raceLaunches()
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			for _, rc := range setupRaces {
				t.Run(rc.name, func(t *testing.T) {
					x := newTarget(t, backend)
					real, decoy, repo, args := rc.prepare(t, x)
					testenv.Chown(t, x.Home)
					realRepo, err := os.Stat(repo)
					if err != nil {
						t.Fatal(err)
					}
					outsideBefore := (&target{Box: x.Box, Outside: x.Outside, Bin: x.Bin, skipGit: true}).snapshot(t)
					victim := checksum(x.Victim)

					var decoyTarget string
					twinRepo := realRepo
					if rc.twin {
						if twinRepo, err = os.Stat(filepath.Join(decoy, "repo")); err != nil {
							t.Fatal(err)
						}
					} else if decoyTarget, err = os.Readlink(decoy); err != nil {
						t.Fatal(err)
					}
					f := &flipper{t: t, x: x, probe: pr, real: real, decoy: decoy, target: decoyTarget}
					f.start()
					ok, refused := 0, 0
					for i := 0; i < n; i++ {
						cmd := x.Command(x.Home, append([]string{"--repo", repo, "--no-git-save", "--no-record"}, args...), raceScript)
						cmd.Env = append(cmd.Env, "N="+strconv.Itoa(i), "PWNED="+x.Pwned)
						for j, a := range args {
							if a == "--add-dir" && j+1 < len(args) {
								cmd.Env = append(cmd.Env, "ADDDIR="+args[j+1])
							}
						}
						r := sandboxtest.Run(cmd)
						races.Add(1)
						switch {
						case r.Code == 0 || auditUnresolved(r):
							// Ran; a session whose audited path the flipper swapped
							// away by its end cannot be audited there, and fails
							// closed (125 with the audit's lines) instead of 0.
							ok++
							if strings.Contains(r.Stdout, "WROTE") && !rc.writerOwnsGitPaths {
								// P7 inside the sandbox: the protected paths are read-only.
								t.Errorf("launch %d: protected Git path writable:\n%s", i, r)
							}
							if !strings.Contains(r.Stdout, "MARKED") {
								t.Errorf("launch %d: the repository was not writable:\n%s", i, r)
							}
						case r.Code == 125 && oneLineRefusal(r.Stderr):
							refused++
						default:
							t.Errorf("launch %d: want 0 or 125 with one line:\n%s", i, r)
						}
						if !f.alive() {
							// The post-session audit moved a swapped path aside (or the
							// flipper lost one): put the fixture back and race on.
							f.stop()
							f.repair()
							f.start()
						}
					}
					f.stop()
					f.repair()
					t.Logf("%d launches: %d ran, %d refused; %d exchanges, %d restarts, %d taken back from quarantine", n, ok, refused, f.flips, f.restarts, f.quarantined)

					// Every marker is in the real repository, and every session that ran left one.
					markers := findMarkers(t, x.Home, x.Outside)
					found := 0
					for _, m := range markers {
						fi, err := os.Stat(filepath.Dir(m))
						if err != nil || !os.SameFile(fi, realRepo) && !os.SameFile(fi, twinRepo) {
							t.Errorf("marker outside the repository: %s", m)
							continue
						}
						found++
					}
					if found != ok {
						t.Errorf("%d sessions ran but %d markers are in the repository", ok, found)
					}
					// What a session wrote to its added directory is in the real one.
					_ = filepath.WalkDir(x.Home, func(p string, d fs.DirEntry, err error) error {
						if err == nil && strings.HasPrefix(d.Name(), "added-") && filepath.Dir(p) != filepath.Join(x.Home, "extra") {
							t.Errorf("added directory's file outside it: %s", p)
						}
						return nil
					})
					x.skipGit = true
					after := (&target{Box: x.Box, Outside: x.Outside, Bin: x.Bin, skipGit: true}).snapshot(t)
					for p, v := range outsideBefore {
						if strings.HasPrefix(p, x.Outside) && after[p] != v {
							t.Errorf("outside changed: %s", p)
						}
					}
					for p := range after {
						if _, seen := outsideBefore[p]; !seen && strings.HasPrefix(p, x.Outside) {
							t.Errorf("created outside: %s", p)
						}
					}
					if checksum(x.Victim) != victim {
						t.Error("the victim file changed")
					}
					// Whatever reached the repository's Git paths, the operator's Git
					// runs nothing afterwards (the audit after each session, P7) —
					// unless the racing writer itself owns those paths (see
					// writerOwnsGitPaths): it could plant there directly.
					if !rc.writerOwnsGitPaths {
						x.Repo = repo
						operatorGitRunsNothing(t, x)
					}
				})
			}
		})
	}
	t.Logf("launches under a setup race: %d", races.Load())
}

// auditUnresolved: the session ran and ended with status 125 because its audit left
// a place it could neither check nor move (the audit's last line says so).
func auditUnresolved(r sandboxtest.Result) bool {
	lines := strings.Split(strings.TrimSpace(r.Stderr), "\n")
	last := lines[len(lines)-1]
	return r.Code == 125 && strings.HasPrefix(last, "agentbox: audit: ") && strings.Contains(last, " left unchecked where your Git")
}

// flipper runs the flip probe as the test user: renameat2(RENAME_EXCHANGE) of real
// and decoy (a symlink to target) without pause.
type flipper struct {
	t                    *testing.T
	x                    *target
	probe                string
	real, decoy, target  string
	cmd                  *exec.Cmd
	stdin                io.WriteCloser
	out, errb            bytes.Buffer
	done                 chan struct{}
	flips, restarts, run int
	quarantined          int // times the audit moved the real object aside
}

func (f *flipper) start() {
	f.t.Helper()
	f.cmd = testenv.Command(f.t, f.x.Home, f.probe, "flip", f.real, f.decoy)
	f.cmd.Env = append(f.cmd.Env, probeEnv+"=1")
	var err error
	if f.stdin, err = f.cmd.StdinPipe(); err != nil {
		f.t.Fatal(err)
	}
	f.out.Reset()
	f.errb.Reset()
	f.cmd.Stdout, f.cmd.Stderr = &f.out, &f.errb
	if err := f.cmd.Start(); err != nil {
		f.t.Fatal(err)
	}
	f.done = make(chan struct{})
	go func() { _ = f.cmd.Wait(); close(f.done) }()
	f.run++
	if f.run > 1 {
		f.restarts++
	}
}

func (f *flipper) alive() bool {
	select {
	case <-f.done:
		return false
	default:
		return true
	}
}

func (f *flipper) stop() {
	f.stdin.Close()
	<-f.done
	var n int
	if _, err := fmt.Sscanf(f.out.String(), "flips %d", &n); err == nil {
		f.flips += n
	}
}

// repair puts the real object back under its name and the decoy symlink beside it.
// A twin needs none: exchanging two real directories never loses either name.
func (f *flipper) repair() {
	f.t.Helper()
	if f.target == "" {
		return
	}
	isLink := func(p string) (exists, link bool) {
		fi, err := os.Lstat(p)
		return err == nil, err == nil && fi.Mode()&fs.ModeSymlink != 0
	}
	if e, l := isLink(f.real); e && l {
		if err := os.Rename(f.real, f.real+".swap"); err != nil {
			f.t.Fatal(err)
		}
		defer os.Remove(f.real + ".swap")
	}
	if e, _ := isLink(f.real); !e {
		if de, dl := isLink(f.decoy); de && !dl {
			if err := os.Rename(f.decoy, f.real); err != nil {
				f.t.Fatal(err)
			}
		}
	}
	if e, _ := isLink(f.real); !e {
		// The audit quarantines by path: racing the flipper, it may have moved the
		// real object aside (STATE/quarantine/ID/PATH, or NAME.agentbox-quarantine-ID in
		// place). Take it back.
		moved, _ := filepath.Glob(f.real + ".agentbox-quarantine-*")
		out, _ := filepath.Glob(filepath.Join(f.x.Home, ".local/state/agentbox/quarantine/*", f.real+"*"))
		moved = append(moved, out...)
		for _, m := range moved {
			if _, l := isLink(m); !l {
				if err := os.Rename(m, f.real); err == nil {
					f.quarantined++
					break
				}
			}
		}
	}
	if e, _ := isLink(f.real); !e {
		f.t.Fatalf("race fixture lost %s (flipper: %s)", f.real, f.errb.String())
	}
	if e, _ := isLink(f.decoy); !e {
		if err := os.Symlink(f.target, f.decoy); err != nil {
			f.t.Fatal(err)
		}
		testenv.Chown(f.t, f.decoy)
	}
}

// findMarkers lists every marker-N file below the roots, without following symlinks.
func findMarkers(t *testing.T, roots ...string) []string {
	t.Helper()
	var out []string
	for _, root := range roots {
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() && strings.HasPrefix(d.Name(), "marker-") {
				out = append(out, p)
			}
			return nil
		})
	}
	return out
}

// oneLineRefusal: a refused launch says why in one line starting "agentbox: ".
// Tolerated before it: bubblewrap's own message (the bwrap backend passes it through
// and says so), and the audit's "not audited" or quarantine notes about a path the
// race swapped (the audit runs after a failed launch too).
func oneLineRefusal(stderr string) bool {
	var own []string
	for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
		if strings.HasPrefix(l, "bwrap: ") || strings.HasPrefix(l, "agentbox: audit: ") {
			continue
		}
		own = append(own, l)
	}
	return len(own) == 1 && strings.HasPrefix(own[0], "agentbox: ") && !strings.Contains(stderr, "goroutine")
}
