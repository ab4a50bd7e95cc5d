package adversarial

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// The smaller holes of issue 14 §6 that are attacks from inside a session: each row
// runs through TestEscapes on both backends, and checks the host afterwards.
func init() { attacks = append(attacks, smallHoleAttacks...) }

var smallHoleAttacks = []attack{
	// The launcher runs bwrap (with the whole sandbox's argv) and the recorder runs
	// git, on the host, as the operator. A PATH naming a directory in the repository
	// (direnv's PATH_add bin, node_modules/.bin) or a relative entry must not make it
	// run what the sandbox wrote there.
	{name: "program planted on the operator's PATH inside the repo", script: `
		mkdir -p bin
		for p in bin/bwrap bwrap bin/git git; do
			printf '#!/bin/sh\ntouch "%s/%s"\nexit 1\n' "$PWNED" "$(echo "$p" | tr / -)" > "$p"
			chmod +x "$p"
		done
		echo DONE`,
		check: func(t *testing.T, x *target, r sandboxtest.Result) {
			bwrapDir := filepath.Dir(sandboxtest.BwrapPath(t))
			if bwrapDir == "." {
				bwrapDir = filepath.Dir(testenv.SetupFile(t, sandboxtest.BuiltBwrap, "bubblewrap 0.12.0 to put on PATH"))
			}
			path := strings.Join([]string{filepath.Join(x.Repo, "bin"), ".", "", bwrapDir, "/usr/local/bin:/usr/bin:/bin"}, ":")
			for _, args := range [][]string{
				{"exec", "--backend", "bwrap", "--no-git-save", "--", "/bin/true"},
				{"exec", "--backend", "bwrap", "--dry-run", "--", "/bin/true"},
				{"doctor"},
			} {
				cmd := testenv.Command(t, x.Home, x.Bin, args...)
				cmd.Dir = x.Repo
				cmd.Env = append(withoutEnv(cmd.Env, "PATH", "AGENTBOX_BWRAP"), "PATH="+path)
				res := sandboxtest.Run(cmd)
				if args[0] == "exec" && res.Code != 0 {
					t.Errorf("agentbox %s with the repository on PATH: want the real bwrap found further down:\n%s", args, res)
				}
			}
			if ents, _ := os.ReadDir(x.Pwned); len(ents) > 0 {
				var names []string
				for _, e := range ents {
					names = append(names, e.Name())
				}
				t.Errorf("agentbox ran programs the sandbox planted on PATH, on the host: %v", names)
			}
		}},
	// A directory given writable to one session (--add-dir here; a kept path or a
	// repository without .git alike) and on the operator's PATH later: agentbox's
	// host side must not run what that session left there in any later command.
	{name: "program planted in an added directory on the operator's PATH later",
		setup: func(t *testing.T, x *target) []string {
			tools := testenv.Dir(t, "tools")
			x.args = append(x.args, "--add-dir", tools)
			x.env = append(x.env, "TOOLS="+tools)
			return nil
		},
		script: `
		for p in git bwrap; do
			printf '#!/bin/sh\ntouch "%s/tools-%s"\nexit 1\n' "$PWNED" "$p" > "$TOOLS/$p"
			chmod +x "$TOOLS/$p"
		done
		echo DONE`,
		check: addedDirOnPathLater},
	// The same directory, where the session cannot write a program the host runs
	// but plants links to one of the host's (review12): the link is what it chose.
	{name: "link planted in an added directory on the operator's PATH later",
		setup: func(t *testing.T, x *target) []string {
			tools := testenv.Dir(t, "tools")
			host := testenv.Dir(t, "host-programs")
			prog := filepath.Join(host, "prog")
			if err := os.WriteFile(prog, []byte(fmt.Sprintf("#!/bin/sh\ntouch %q/linked\nexit 1\n", x.Pwned)), 0o755); err != nil {
				t.Fatal(err)
			}
			testenv.Chown(t, prog)
			x.args = append(x.args, "--add-dir", tools)
			x.env = append(x.env, "TOOLS="+tools, "HOSTPROG="+prog)
			return nil
		},
		script: `
		for p in git bwrap; do ln -s "$HOSTPROG" "$TOOLS/$p"; done
		echo DONE`,
		check: addedDirOnPathLater},
}

// withoutEnv drops the variables named from env.
func withoutEnv(env []string, names ...string) []string {
	var out []string
	for _, kv := range env {
		keep := true
		for _, n := range names {
			keep = keep && !strings.HasPrefix(kv, n+"=")
		}
		if keep {
			out = append(out, kv)
		}
	}
	return out
}

// hostileTmp leaves in /tmp what a sandbox can make that plain removal chokes on:
// directories with mode 000, without x, read-only; a FIFO; nesting deeper than
// PATH_MAX; symlinks to a host directory and to the victim. Then it touches ready.
const hostileTmp = `set -e
	mkdir -p /tmp/locked/inner /tmp/noexec/inner /tmp/readonly/inner /tmp/fifo
	for d in locked/inner noexec/inner readonly/inner fifo; do echo x > /tmp/$d/file; chmod 000 /tmp/$d/file; done
	mkfifo /tmp/fifo/pipe
	ln -s "$OUTSIDE" /tmp/locked/inner/out; ln -s "$VICTIM" /tmp/victim-link
	perl -e 'chdir "/tmp" or die; for (1..200) { mkdir "d" x 100 or die; chdir "d" x 100 or die } mkdir "bottom", 0 or die'
	chmod 000 /tmp/locked/inner /tmp/locked; chmod 600 /tmp/noexec; chmod 500 /tmp/readonly; chmod 300 /tmp/fifo
	echo HOSTILE
`

// TestDiskTmpHostileLeftovers: whatever the command leaves in a --disk-tmp /tmp is
// gone when the session ends (P10), and when the launcher was killed, agentbox gc
// removes it and succeeds; nothing a symlink there points at changes.
func TestDiskTmpHostileLeftovers(t *testing.T) {
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			x := newTarget(t, backend)
			before := x.snapshot(t)
			flags := []string{"--disk-tmp", "--no-git-save", "--no-record"}
			cmd := x.Command(x.Repo, flags, hostileTmp)
			cmd.Env = append(cmd.Env, "OUTSIDE="+x.Outside, "VICTIM="+x.Victim)
			r := sandboxtest.Run(cmd)
			if r.Code != 0 || !strings.Contains(r.Stdout, "HOSTILE") {
				t.Fatalf("session: %s", r)
			}
			if d := diskTmpDirs(x.Home); len(d) != 0 {
				t.Errorf("--disk-tmp dir left after the session: %v\n%s", d, r)
			}

			// The launcher killed: the dir stays for gc, which must remove it.
			left := len(diskTmpDirs(x.Home))
			cmd = x.Command(x.Repo, flags, hostileTmp+`touch "$REPO/ready"; sleep 300`)
			cmd.Env = append(cmd.Env, "OUTSIDE="+x.Outside, "VICTIM="+x.Victim)
			res := make(chan sandboxtest.Result, 1)
			if err := sandboxtest.StartAndCollect(cmd, res); err != nil {
				t.Fatal(err)
			}
			if !sandboxtest.WaitFor(func() bool { return sandboxtest.Exists(filepath.Join(x.Repo, "ready")) }) {
				_ = cmd.Process.Kill()
				t.Fatalf("session never got ready: %s", <-res)
			}
			_ = cmd.Process.Kill()
			<-res
			if d := diskTmpDirs(x.Home); len(d) != left+1 {
				t.Fatalf("the killed launcher's --disk-tmp dir: %v (nothing for gc to test)", d)
			}
			g := gc(t, x.Box)
			if g.Code != 0 {
				t.Errorf("agentbox gc failed on a hostile leftover: %s", g)
			}
			if d := diskTmpDirs(x.Home); len(d) != 0 {
				t.Errorf("gc left %v\n%s", d, g)
			}
			x.unchanged(t, before)
		})
	}
}

// hostileNames makes, inside the session, file names, file content, a commit message,
// a branch name and a config value carrying terminal commands: ESC sequences (clear
// screen, set title), BEL, CR, the 8-bit CSI (U+009B) and a bidi override (U+202E);
// a nested repository with such a name holds a planted fsmonitor the audit reports.
const hostileNames = `set -e
	E=$(printf '\033'); B=$(printf '\007'); C1=$(printf '\302\233'); BIDI=$(printf '\342\200\256')
	name="f${E}[2J${C1}31m${BIDI}x"
	printf 'line %s[1A%s\n' "$E" "$BIDI" > "$name"
	printf 'x\r\n' > "cr${E}]0;title${B}"
	printf '\377\376 not utf-8\n' > "$(printf 'bad\377')"
	git add -A >/dev/null 2>&1
	git commit -qm "msg ${E}]0;pwned${B} ${C1}2J ${BIDI}" >/dev/null 2>&1
	git branch "b${C1}${BIDI}" >/dev/null 2>&1
	git init -q "s${C1}2J${BIDI}" >/dev/null 2>&1
	mkdir "sub${E}[2J"; cd "sub${E}[2J"; git init -q >/dev/null 2>&1
	printf '[core]\n\tfsmonitor = "touch %s/fsmonitor %s[2J%s"\n' "$PWNED" "$E" "$BIDI" >> .git/config
`

// terminalCommands lists what in out a terminal could act on: C0 controls but
// newline and tab, DEL, C1 controls, bidi controls, bytes that are not UTF-8.
func terminalCommands(out string) []string {
	var bad []string
	for i, r := range out {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(out[i:], "\uFFFD"):
			bad = append(bad, fmt.Sprintf("byte %#x at %d", out[i], i))
		case r < 0x20 && r != '\n' && r != '\t', r == 0x7f, r >= 0x80 && r <= 0x9f,
			r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
			bad = append(bad, fmt.Sprintf("%U at %d", r, i))
		}
	}
	return bad
}

// TestHostileStringsOnTerminal: every string from the repository or the sandbox that
// agentbox prints — audit lines, log, show, diff (on a terminal), audit, doctor, error
// messages naming repository paths — reaches the operator's terminal without a byte
// the terminal could take as a command.
func TestHostileStringsOnTerminal(t *testing.T) {
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			x := newTarget(t, backend)
			testenv.Git(t, x.Home, x.Repo, "commit", "-q", "--allow-empty", "-m", "start")
			run := func(name string, args ...string) sandboxtest.Result {
				cmd := x.Agentbox(x.Repo, args...)
				cmd.Env = append(cmd.Env, "PWNED="+x.Pwned)
				r := sandboxtest.Run(cmd)
				if bad := terminalCommands(r.Stdout + r.Stderr); len(bad) > 0 {
					t.Errorf("agentbox %s printed terminal commands %v:\n%q\n%q", name, bad, r.Stdout, r.Stderr)
				}
				return r
			}
			r := run("exec", "exec", "--backend", backend, "--no-git-save", "--", "/bin/sh", "-c", hostileNames, "sh", "arg\x1b[2J\u202e")
			if r.Code != 0 || !strings.Contains(r.Stderr, "agentbox: audit:") {
				t.Fatalf("session with hostile names: want exit 0 and an audit finding:\n%s", r)
			}
			l := run("log", "log")
			lines := strings.Split(strings.TrimSpace(l.Stdout), "\n")
			if l.Code != 0 || len(lines) < 2 {
				t.Fatalf("agentbox log: %s", l)
			}
			id, _, _ := strings.Cut(lines[1], " ")
			if s := run("show", "show", id); s.Code != 0 || !strings.Contains(s.Stdout, "audit") {
				t.Errorf("agentbox show %s: %s", id, s)
			}
			// JSON keeps every value: a C1 or bidi control goes out as its \u
			// escape, which a JSON reader decodes to the same string.
			for _, args := range [][]string{{"show", "--json", id}, {"log", "--json"}, {"show", "--json", id + "@0"},
				{"exec", "--backend", backend, "--dry-run", "--json", "--", "true"}} {
				j := run(strings.Join(args, " "), args...)
				if j.Code != 0 || !json.Valid([]byte(j.Stdout)) {
					t.Errorf("agentbox %s: want exit 0 and JSON: %s", args, j)
				}
			}
			if j := run("show --json", "show", "--json", id); !strings.Contains(j.Stdout, `"s\u009b2J\u202e/.git/HEAD"`) {
				t.Errorf("agentbox show --json %s: the file the record left out is not named (escaped):\n%s", id, j.Stdout)
			} else {
				var rec struct {
					NotRecorded []struct{ Path string } `json:"not_recorded"`
				}
				if err := json.Unmarshal([]byte(j.Stdout), &rec); err != nil || !slices.ContainsFunc(rec.NotRecorded, func(n struct{ Path string }) bool { return n.Path == "s\u009b2J\u202e/.git/HEAD" }) {
					t.Errorf("agentbox show --json %s: the escaped name does not decode to the file's name (%v): %+v", id, err, rec.NotRecorded)
				}
			}
			run("audit", "audit")
			run("exec with a hostile --repo", "exec", "--backend", backend, "--repo", x.Repo+"/sub\x1b[2J/missing\u202e", "--", "true")
			doc := x.Agentbox(x.Repo, "doctor")
			doc.Env = append(withoutEnv(doc.Env, "AGENTBOX_BWRAP"), "AGENTBOX_BWRAP=/nonexistent/\x1b[2Jbw\u202erap")
			if d := sandboxtest.Run(doc); len(terminalCommands(d.Stdout+d.Stderr)) > 0 {
				t.Errorf("agentbox doctor printed terminal commands %v:\n%q", terminalCommands(d.Stdout+d.Stderr), d.Stdout)
			}
			doc = x.Agentbox(x.Repo, "doctor", "--json")
			doc.Env = append(withoutEnv(doc.Env, "AGENTBOX_BWRAP"), "AGENTBOX_BWRAP=/nonexistent/\x1b[2Jbw\u009b\u202erap")
			if d := sandboxtest.Run(doc); len(terminalCommands(d.Stdout+d.Stderr)) > 0 || !json.Valid([]byte(d.Stdout)) {
				t.Errorf("agentbox doctor --json printed terminal commands %v or no JSON:\n%q", terminalCommands(d.Stdout+d.Stderr), d.Stdout)
			}
			for _, args := range [][]string{{"diff", id}, {"diff", "--stat", id}} {
				cmd := x.Agentbox(x.Repo, args...)
				out, _ := onTerminal(t, cmd)
				// The terminal's own output processing turns \n into \r\n.
				out = strings.ReplaceAll(out, "\r\n", "\n")
				if bad := terminalCommands(out); len(bad) > 0 {
					t.Errorf("agentbox %s on a terminal printed terminal commands %v:\n%q", args, bad, out)
				}
				if !strings.Contains(out, `\x1b[2J`) && !strings.Contains(out, `\033[2J`) {
					t.Errorf("agentbox %s: the hostile file is not shown (escaped):\n%q", args, out)
				}
			}
		})
	}
}

// addedDirOnPathLater is the check of the planted-in-an-added-directory escapes:
// with that directory (then renamed) first on PATH, agentbox's host-side commands
// find the real programs and run nothing the session left there.
func addedDirOnPathLater(t *testing.T, x *target, _ sandboxtest.Result) {
	tools := ""
	for i, a := range x.args {
		if a == "--add-dir" && i+1 < len(x.args) {
			tools = x.args[i+1]
		}
	}
	bwrapDir := filepath.Dir(sandboxtest.BwrapPath(t))
	if bwrapDir == "." {
		bwrapDir = filepath.Dir(testenv.SetupFile(t, sandboxtest.BuiltBwrap, "bubblewrap 0.12.0 to put on PATH"))
	}
	// Renamed (or bind-mounted, or linked to) later, the directory is still
	// the one given: the ledger lists its identity too.
	renamed := tools + "-renamed"
	for i, dir := range []string{tools, renamed} {
		if i == 1 {
			if err := os.Rename(tools, renamed); err != nil {
				t.Fatal(err)
			}
		}
		path := strings.Join([]string{dir, bwrapDir, "/usr/local/bin:/usr/bin:/bin"}, ":")
		for _, args := range [][]string{
			{"exec", "--no-git-save", "--", "/bin/true"}, // the recorder's git
			{"exec", "--backend", "bwrap", "--no-git-save", "--no-record", "--", "/bin/true"},
			{"log"},
			{"doctor"},
		} {
			cmd := testenv.Command(t, x.Home, x.Bin, args...)
			cmd.Dir = x.Repo
			cmd.Env = append(withoutEnv(cmd.Env, "PATH", "AGENTBOX_BWRAP"), "PATH="+path)
			res := sandboxtest.Run(cmd)
			if args[0] != "doctor" && res.Code != 0 {
				t.Errorf("agentbox %s with the added directory first on PATH as %s: want the real programs found further down:\n%s", args, dir, res)
			}
		}
	}
	if names := testenv.DirNames(t, x.Pwned); len(names) > 0 {
		t.Errorf("agentbox ran programs an earlier session planted in its added directory, on the host: %v", names)
	}
}

// TestGoAPIDiskTmpFollowsTheOperatorsCache: a Go API program whose Options.Home
// gives the command a HOME of its own keeps a DiskTmp session's directory in the
// operator's cache (${XDG_CACHE_HOME:-$HOME/.cache} of the program), where
// `agentbox gc` looks. Killed, the program leaves the directory; gc removes it. On
// main the directory lay below Options.Home, which gc never reads: it stayed for good.
func TestGoAPIDiskTmpFollowsTheOperatorsCache(t *testing.T) {
	b := sandboxtest.NewBox(t, sandboxtest.GoAPI)
	agentHome := testenv.Dir(t, "agent-home")
	cmd := b.Command(b.Repo, []string{"--home", agentHome, "--disk-tmp", "--no-git-save", "--no-record"},
		`touch /tmp/left "$REPO/ready"; sleep 300`)
	res := make(chan sandboxtest.Result, 1)
	if err := sandboxtest.StartAndCollect(cmd, res); err != nil {
		t.Fatal(err)
	}
	if !sandboxtest.WaitFor(func() bool { return sandboxtest.Exists(filepath.Join(b.Repo, "ready")) }) {
		_ = cmd.Process.Kill()
		t.Fatalf("session never got ready: %s", <-res)
	}
	_ = cmd.Process.Kill()
	<-res
	if d := diskTmpDirs(agentHome); len(d) != 0 {
		t.Errorf("the DiskTmp directory lay below Options.Home, where gc never looks: %v", d)
	}
	if d := diskTmpDirs(b.Home); len(d) != 1 {
		t.Fatalf("the killed program's DiskTmp directory in the operator's cache: %v, want one", d)
	}
	if g := gc(t, b); g.Code != 0 {
		t.Errorf("agentbox gc: %s", g)
	}
	if d := diskTmpDirs(b.Home); len(d) != 0 {
		t.Errorf("gc left the killed program's DiskTmp directory: %v", d)
	}
}
