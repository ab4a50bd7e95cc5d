package adversarial

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbox/agentbox/gitguard/snapshot"
	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// launches counts every agentbox launch of the load tests, for the report.
var launches atomic.Int64

// loadLaunches is the sequential launch count: 1,000 for native unless
// AGENTBOX_LOAD_LAUNCHES says otherwise; bwrap gets a tenth (its launch is bwrap's
// own, already covered by bubblewrap's tests; the CI budget goes to native).
func loadLaunches(backend string) int {
	n := 1000
	if v, err := strconv.Atoi(os.Getenv("AGENTBOX_LOAD_LAUNCHES")); err == nil && v > 0 {
		n = v
	}
	if backend == "bwrap" {
		n /= 10
	}
	return n
}

// hostState is what launches could leak on the host, seen from the test process.
// Other test processes on the machine run agentbox as the same user, so processes
// and directories are counted only when they are this test's: processes whose
// environment names this box's repository, staging dirs of this test's launchers;
// mounts in the test's own mount namespace (ownMountTable).
type hostState struct {
	fds, mounts, procs, guardDirs, cacheTmp int
}

// readHostState reads it. A launch's raw init exits a moment after its launcher
// (docs/security.md, the cgroup tree), so a just-ended launch can still show as a
// process: the count is read once none is left, bounded. A process that leaked
// stays, and the bound reports it.
func readHostState(t *testing.T, b *sandboxtest.Box, launchers []int) hostState {
	t.Helper()
	sandboxtest.WaitForUpTo(20*time.Second, func() bool { return len(procsWithEnv("REPO="+b.Repo)) == 0 })
	var s hostState
	ents, _ := os.ReadDir("/proc/self/fd")
	s.fds = len(ents)
	s.mounts = strings.Count(mountTable(t), "\n")
	s.procs = len(procsWithEnv("REPO=" + b.Repo))
	for _, pid := range launchers {
		s.guardDirs += len(guardDirs(pid))
	}
	c, _ := filepath.Glob(filepath.Join(b.Home, ".cache/agentbox/tmp/*"))
	s.cacheTmp = len(c)
	return s
}

// procsWithEnv lists the PIDs whose environment holds the entry kv.
func procsWithEnv(kv string) []string {
	var pids []string
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", p.Name(), "environ"))
		if err != nil {
			continue
		}
		for _, e := range strings.Split(string(env), "\x00") {
			if e == kv {
				pids = append(pids, p.Name())
				break
			}
		}
	}
	return pids
}

// TestSequentialLaunches: 1,000 launches of `true` through the CLI leave nothing
// behind: the same fds in the launching process, the same host mounts, no new
// processes of the test user, no push-guard staging or --disk-tmp directories.
func TestSequentialLaunches(t *testing.T) {
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			ownMountTable(t)
			b := sandboxtest.NewBox(t, backend)
			args := []string{"--no-git-save", "--no-record", "--disk-tmp"}
			n := loadLaunches(backend)
			// Warm up (caches, the first placeholder) before taking the baseline.
			for i := 0; i < 5; i++ {
				if r := sandboxtest.Run(b.Command(b.Repo, args, "true")); r.Code != 0 {
					t.Fatalf("warm-up launch: %s", r)
				}
			}
			before := readHostState(t, b, nil)
			failures := map[string]int{}
			var pids []int
			for i := 0; i < n; i++ {
				cmd := b.Command(b.Repo, append(args, "--", "/bin/true"), "")
				r := sandboxtest.Run(cmd)
				launches.Add(1)
				if cmd.Process != nil {
					pids = append(pids, cmd.Process.Pid)
				}
				if r.Code != 0 {
					failures[strings.TrimSpace(r.Stderr)+" (exit "+strconv.Itoa(r.Code)+")"]++
				}
			}
			after := readHostState(t, b, pids)
			for msg, k := range failures {
				t.Errorf("%d of %d launches failed: %s", k, n, msg)
			}
			if after != before {
				t.Errorf("after %d launches: %+v, before: %+v", n, after, before)
			}
		})
	}
}

// TestGoAPILaunches: a long-lived Go program launching through sandbox.Run (the
// probe, running as the test user) keeps its fds, mounts, threads and children flat
// over 1,000 launches, and its heap and resident memory bounded.
func TestGoAPILaunches(t *testing.T) {
	ownMountTable(t) // the probe starts in it
	b := sandboxtest.NewBox(t, "native")
	n := loadLaunches("native")
	cmd := testenv.Command(t, b.Home, probe(t), "launches", strconv.Itoa(n), b.Bin, b.Repo, b.Home)
	cmd.Env = append(cmd.Env, probeEnv+"=1")
	cmd.Dir = b.Repo
	r := sandboxtest.Run(cmd)
	launches.Add(int64(n + 10))
	if r.Code != 0 {
		t.Fatalf("probe: %s", r)
	}
	var rep struct {
		Before, After struct{ Fds, Mounts, Threads, Children, HeapKB, RSSKB int }
		Failures      int    `json:"failures"`
		FirstError    string `json:"first_error"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil {
		t.Fatalf("probe output: %v\n%s", err, r)
	}
	t.Logf("before %+v\nafter  %+v", rep.Before, rep.After)
	if rep.Failures > 0 {
		t.Errorf("%d of %d launches failed; first: %s", rep.Failures, n+10, rep.FirstError)
	}
	a, bf := rep.After, rep.Before
	if a.Fds != bf.Fds || a.Mounts != bf.Mounts || a.Children != 0 {
		t.Errorf("fds %d→%d, mounts %d→%d, children %d after %d launches", bf.Fds, a.Fds, bf.Mounts, a.Mounts, a.Children, n)
	}
	// Threads vary with the Go scheduler (a loaded machine makes it start more for
	// blocking syscalls); a leak grows with n, which is 1,000 here.
	if a.Threads > bf.Threads+32 {
		t.Errorf("threads %d→%d", bf.Threads, a.Threads)
	}
	// A per-launch leak of even 1 KiB shows as 1 MiB here; the bounds leave room
	// for the runtime's own noise only.
	if a.HeapKB > bf.HeapKB+1024 || a.RSSKB > bf.RSSKB+16*1024 {
		t.Errorf("memory grew: heap %d→%d KiB, RSS %d→%d KiB", bf.HeapKB, a.HeapKB, bf.RSSKB, a.RSSKB)
	}
}

// TestConcurrentSessions: 50 sessions at once on 5 repositories (one HOME, so one
// shadow store), with the real snapshot and record. Each exits with its own status;
// each has its own complete snapshot ZIP and its own record, which lists its file.
func TestConcurrentSessions(t *testing.T) {
	const repos, perRepo = 5, 10
	b := sandboxtest.NewBox(t, "native")
	backends := sandboxtest.Backends(t)
	var dirs []string
	for i := 0; i < repos; i++ {
		d := filepath.Join(b.Home, fmt.Sprintf("proj%d", i))
		mkUserDir(t, d)
		testenv.Git(t, b.Home, d, "init", "-q")
		sandboxtest.WriteFile(t, filepath.Join(d, "README"), "hello\n")
		testenv.Chown(t, d)
		dirs = append(dirs, d)
	}
	type outcome struct {
		repo, file string
		want       int
		r          sandboxtest.Result
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		outs []outcome
	)
	for i := 0; i < repos*perRepo; i++ {
		repo := dirs[i%repos]
		x := *b
		x.Backend = backends[i%len(backends)] // both backends share the load
		file := fmt.Sprintf("file-%02d", i)
		want := i % 7
		cmd := x.Command(repo, []string{"--git-save-keep", "0"}, fmt.Sprintf("echo %d > %s; sleep 0.2; exit %d", i, file, want))
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := sandboxtest.Run(cmd)
			launches.Add(1)
			mu.Lock()
			outs = append(outs, outcome{repo: repo, file: file, want: want, r: r})
			mu.Unlock()
		}()
	}
	wg.Wait()
	for _, o := range outs {
		if o.r.Code != o.want {
			t.Errorf("%s in %s: exit %d, want %d\n%s", o.file, o.repo, o.r.Code, o.want, o.r)
		}
	}
	snapshots := map[string]bool{}
	for _, repo := range dirs {
		out := agentbox(t, b, "log", "--repo", repo)
		var ids []string
		for _, l := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
			ids = append(ids, strings.Fields(l)[0])
		}
		if len(ids) != perRepo {
			t.Errorf("%s: %d sessions recorded, want %d:\n%s", repo, len(ids), perRepo, out)
		}
		files := map[string]bool{}
		for _, id := range ids {
			show := agentbox(t, b, "show", id)
			zipPath := field(show, "snapshot")
			// Sessions that found .git as another left it name that one's snapshot
			// (docs/git.md): a snapshot is shared only within its repository's store.
			if zipPath == "" || !strings.Contains(zipPath, "/"+filepath.Base(repo)+"-") {
				t.Errorf("session %s: snapshot %q missing or not the store of %s", id, zipPath, repo)
			} else if !snapshots[zipPath] {
				snapshots[zipPath] = true
				if _, err := snapshot.CheckStored(zipPath); err != nil {
					t.Errorf("session %s: snapshot: %v", id, err)
				}
			}
			cmdline := field(show, "command")
			i := strings.Index(cmdline, "file-")
			if i < 0 {
				t.Errorf("session %s: command %q", id, cmdline)
				continue
			}
			own := cmdline[i : i+len("file-00")]
			files[own] = true
			if diff := agentbox(t, b, "diff", "--stat", id); !strings.Contains(diff, own) {
				t.Errorf("session %s: its record does not list %s:\n%s", id, own, diff)
			}
			want, _ := strconv.Atoi(strings.TrimPrefix(own, "file-"))
			if got := field(show, "exit status"); got != strconv.Itoa(want%7) {
				t.Errorf("session %s (%s): recorded exit status %q, want %d", id, own, got, want%7)
			}
		}
		if len(files) != perRepo {
			t.Errorf("%s: records cover %d distinct sessions, want %d", repo, len(files), perRepo)
		}
	}
	if len(snapshots) < repos {
		t.Errorf("%d distinct snapshots, want one per repository at least", len(snapshots))
	}
}

// agentbox runs an agentbox subcommand as the test user in b's HOME.
func agentbox(t *testing.T, b *sandboxtest.Box, args ...string) string {
	t.Helper()
	r := sandboxtest.Run(testenv.Command(t, b.Home, b.Bin, args...))
	if r.Code != 0 {
		t.Fatalf("agentbox %v: %s", args, r)
	}
	return r.Stdout
}

// field is the value of a `agentbox show` line "name   value".
func field(show, name string) string {
	for _, l := range strings.Split(show, "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
