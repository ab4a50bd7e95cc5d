package vmtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// EnvDelegated is set by the kernel matrix in the cell whose test user runs in a
// cgroup v2 subtree delegated to it, as systemd delegates one to each user.
const EnvDelegated = "AGENTBOX_KMATRIX_DELEGATED"

// limitFlags are the limits, each with a value this machine accepts.
var limitFlags = [][]string{{"--memory", "64M"}, {"--pids", "64"}, {"--cpus", "0.5"}}

// session runs agentbox as the test user with a HOME kept across calls (so that
// show finds the session), in repo.
type session struct {
	home, repo string
}

func newSession(t *testing.T) session {
	s := session{home: testenv.Dir(t, "home"), repo: testenv.Dir(t, "repo")}
	testenv.Git(t, s.home, s.repo, "init", "-q")
	return s
}

func (s session) run(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := testenv.Command(t, s.home, testenv.Binary(t), args...)
	cmd.Dir = s.repo
	if _, err := os.Stat(sandboxtest.BuiltBwrap); err == nil {
		cmd.Env = append(cmd.Env, "AGENTBOX_BWRAP="+sandboxtest.BuiltBwrap)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("agentbox %s: %v", strings.Join(args, " "), err)
	}
	return stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()
}

// enforcedHere is, for each of limitFlags, whether this machine enforces it: in the
// kernel matrix's delegated cell all three, in its other cells none; on another
// host what doctor says for the test user, flag by flag (a host may delegate
// memory and pids but not cpu, as systemd before 252 does).
func enforcedHere(t *testing.T) map[string]bool {
	enforced := map[string]bool{}
	switch {
	case os.Getenv(EnvDelegated) == "1":
		for _, f := range limitFlags {
			enforced[f[0]] = true
		}
	case os.Getenv("AGENTBOX_KMATRIX") == "1":
	default:
		rep, _ := doctor(t)
		if len(rep.Limits) != len(limitFlags) {
			t.Fatalf("doctor reports %d limits, want %d: %+v", len(rep.Limits), len(limitFlags), rep.Limits)
		}
		for _, l := range rep.Limits {
			enforced[l.Flag] = l.OK
		}
	}
	return enforced
}

// TestLimits: each limit this machine enforces holds, only the session suffers, and
// agentbox says which limit ended the command (limitEnforced); each it does not is
// refused (limitRefused). Nothing is skipped: a host with some controllers delegated
// and not others tests both.
func TestLimits(t *testing.T) {
	enforced := enforcedHere(t)
	s := newSession(t)
	// A process of the same user outside the sandbox, in the launcher's cgroup:
	// it must live through every limit the session runs into.
	sleeper := testenv.Command(t, s.home, "sleep", "600")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() }()
	alive := func(t *testing.T, what string) {
		if err := sleeper.Process.Signal(syscall.Signal(0)); err != nil {
			t.Errorf("after %s the host's sleeper is gone: %v", what, err)
		}
	}
	var some []string
	for _, f := range limitFlags {
		t.Run(strings.TrimPrefix(f[0], "--"), func(t *testing.T) {
			if !enforced[f[0]] {
				limitRefused(t, s, f)
				return
			}
			some = f
			limitEnforced[f[0]](t, s, alive)
		})
	}
	if some != nil {
		t.Run("cgroup", func(t *testing.T) { sessionCgroup(t, s, some) })
	}
}

// limitRefused: where no cgroup v2 subtree with the controller is delegated to the
// user (a cgroup v1 host, a VM whose user sits in the root's cgroup), the flag refuses
// the launch with exit 125 and one line naming the flag, why and the fix — never a
// session without its limit.
func limitRefused(t *testing.T, s session, f []string) {
	_, stderr, code := s.run(t, append([]string{"exec", "--no-record", "--repo", s.repo}, append(f, "--", "true")...)...)
	line := strings.TrimSpace(stderr)
	if code != 125 || strings.Count(line, "\n") > 0 || !strings.HasPrefix(line, "agentbox: "+f[0]+": refused: this host cannot enforce it: ") ||
		!strings.Contains(line, "cgroup") || !strings.Contains(line, "leave the flag out") {
		t.Errorf("%s %s: exit %d, stderr %q; want 125 and one line naming the flag, the reason and the fix", f[0], f[1], code, stderr)
	}
}

// limitEnforced are, per flag, the checks that the limit holds in a delegated cgroup
// v2 subtree, that only the session suffers and that agentbox names the limit.
var limitEnforced = map[string]func(t *testing.T, s session, alive func(*testing.T, string)){
	"--memory": func(t *testing.T, s session, alive func(*testing.T, string)) {
		// Both backends: the native one's Go init, and bwrap, started in the
		// session's cgroup before the command starts.
		for _, backend := range [][]string{{"--backend", "native"}, {"--backend", "bwrap"}} {
			args := append(append([]string{"exec"}, backend...), "--memory", "48M", "--", "perl", "-e", `$x = "a" x (200 << 20); print "survived\n"`)
			_, stderr, code := s.run(t, args...)
			if code != 128+9 || !strings.Contains(stderr, "agentbox: memory limit 48M reached (--memory)") {
				t.Errorf("%s: 200 MiB under --memory 48M: exit %d, stderr %q; want 137 and the limit named", backend[1], code, stderr)
			}
			alive(t, "--memory")
			u := lastUsage(t, s)
			if u.PeakMemory > 48<<20 || !strings.HasPrefix(u.Source, "cgroup") {
				t.Errorf("%s: record's usage %+v: want the cgroup's peak, at most 48M", backend[1], u)
			}
		}
		// tmpfs pages are charged to the session: /tmp filled past --memory (with
		// a larger --tmp-size) ends the session at the memory limit, not the host.
		_, stderr, code := s.run(t, "exec", "--memory", "48M", "--tmp-size", "200M", "--", "dd", "if=/dev/zero", "of=/tmp/fill", "bs=1M", "count=150")
		if code != 128+9 || !strings.Contains(stderr, "agentbox: memory limit 48M reached (--memory)") {
			t.Errorf("150 MiB into /tmp under --memory 48M: exit %d, stderr %q; want 137 and the limit named", code, stderr)
		}
		alive(t, "--memory with /tmp")
	},
	"--pids": func(t *testing.T, s session, alive func(*testing.T, string)) {
		// The shell gives up at its first refused fork (dash exits 2). Before it
		// forks, it raises every pids.max it can reach (raiseThenFork).
		out, stderr, code := s.run(t, "exec", "--pids", "32", "--", "sh", "-c", raiseThenFork)
		if code == 0 || !strings.Contains(stderr, "agentbox: process limit 32 reached (--pids)") {
			t.Errorf("fork bomb under --pids 32 after raising what it could (%q): exit %d, stderr %q; want it stopped, and the limit named", out, code, stderr)
		}
		if strings.Contains(out, "WROTE ") {
			t.Errorf("the command wrote the host's cgroup files:\n%s", out)
		}
		t.Logf("the command's attempts on the pids limits: %q", out)
		alive(t, "--pids")
		if out, err := testenv.Command(t, s.home, "sh", "-c", "sleep 0 & wait; echo forked").Output(); err != nil || !strings.Contains(string(out), "forked") {
			t.Errorf("the user cannot fork outside after the session: %q, %v", out, err)
		}
		if u := lastUsage(t, s); u.PeakTasks > 32 {
			t.Errorf("record's peak tasks %d above --pids 32", u.PeakTasks)
		}
	},
	"--cpus": func(t *testing.T, s session, alive func(*testing.T, string)) {
		spin := `end=$(($(date +%s)+3)); while [ $(date +%s) -lt $end ]; do :; done`
		_, stderr, code := s.run(t, "exec", "--cpus", "0.5", "--", "sh", "-c", spin)
		if code != 0 {
			t.Fatalf("spin under --cpus 0.5: exit %d: %s", code, stderr)
		}
		alive(t, "--cpus")
		if u := lastUsage(t, s); u.Throttled <= 0 || u.CPUUsec <= 0 {
			t.Errorf("record's usage %+v: want throttled periods and CPU time", u)
		}
	},
}

// sessionCgroup: a limited session's cgroup namespace is rooted at its leaf (the
// command and PID 1 read 0::/, on both backends), and the cgroups a command could
// make below its own (in a nested cgroup namespace) are bounded, within what the
// session's end removes.
func sessionCgroup(t *testing.T, s session, limit []string) {
	for _, backend := range []string{"native", "bwrap"} {
		args := append(append([]string{"exec", "--backend", backend}, limit...), "--", "sh", "-c", "grep '^0::' /proc/self/cgroup /proc/1/cgroup")
		out, stderr, code := s.run(t, args...)
		if want := "/proc/self/cgroup:0::/\n/proc/1/cgroup:0::/\n"; code != 0 || out != want {
			t.Errorf("%s %s: the sandbox's cgroups: exit %d, %q (stderr %q); want %q", backend, strings.Join(limit, " "), code, out, stderr, want)
		}
	}
	show := `for d in /sys/fs/cgroup/agentbox-* /sys/fs/cgroup/*/agentbox-* /sys/fs/cgroup/*/*/agentbox-*; do [ -f "$d/cgroup.max.descendants" ] && echo "$(cat "$d/cgroup.max.descendants") $(cat "$d/cgroup.max.depth")"; done; true`
	out, stderr, code := s.run(t, append(append([]string{"exec"}, limit...), "--", "sh", "-c", show)...)
	if code != 0 || strings.TrimSpace(out) != "1024 16" {
		t.Errorf("the session cgroup's bounds seen from inside: exit %d, %q (stderr %q); want \"1024 16\"", code, out, stderr)
	}
}

type usage struct {
	Source     string `json:"source"`
	CPUUsec    int64  `json:"cpu_usec"`
	PeakMemory int64  `json:"peak_memory"`
	PeakTasks  int64  `json:"peak_tasks"`
	Throttled  int64  `json:"throttled"`
}

// lastUsage is the usage the record of s's last session holds.
func lastUsage(t *testing.T, s session) usage {
	t.Helper()
	out, stderr, code := s.run(t, "show", "--json")
	var rec struct {
		Usage *usage `json:"usage"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &rec) != nil || rec.Usage == nil {
		t.Fatalf("agentbox show --json: exit %d, no usage in %s%s", code, out, stderr)
	}
	return *rec.Usage
}

// TestLimitBadInput: the real binary refuses each bad value of --memory, --pids and
// --cpus with exit 125 and one line naming the flag and why, before anything else.
func TestLimitBadInput(t *testing.T) {
	s := session{home: testenv.Dir(t, "home"), repo: testenv.Dir(t, "repo")}
	for _, c := range []struct{ flag, value, why string }{
		{"--memory", "512", "below the minimum of 16M (a number without a suffix is bytes)"},
		{"--memory", "0", "not a positive size"},
		{"--memory", "-1G", "not a positive size"},
		{"--memory", "1.5G", "not a positive size"},
		{"--memory", "8000T", "more than this machine's memory"},
		{"--pids", "0", "not a positive whole number"},
		{"--pids", "-1", "not a positive whole number"},
		{"--pids", "7", "below the minimum of 8"},
		{"--pids", "99999999", "more than this machine's kernel.pid_max"},
		{"--cpus", "0", "below the minimum of 0.01"},
		{"--cpus", "-1", "not a number of CPUs"},
		{"--cpus", "1e9", "not a number of CPUs"},
		{"--cpus", "100000", "more than this machine's"},
	} {
		_, stderr, code := s.run(t, "exec", "--no-record", "--repo", s.repo, c.flag, c.value, "--", "true")
		line := strings.TrimSpace(stderr)
		if code != 125 || strings.Contains(line, "\n") || !strings.Contains(line, c.flag) || !strings.Contains(line, c.why) {
			t.Errorf("%s %s: exit %d, stderr %q; want 125 and one line saying %q", c.flag, c.value, code, stderr, c.why)
		}
	}
}

// BenchmarkLimitsLaunch is the launch cost of the limits, interleaved round by
// round: agentbox exec -- true plain, with --pids and --cpus (the raw init stays),
// and with --memory too (the Go init). Run it where the limits are enforced (the
// kernel matrix's delegated cell, or a host whose doctor says so):
// go test ./kmatrix/vmtest -run '^$' -bench LimitsLaunch -benchtime 20x.
func BenchmarkLimitsLaunch(b *testing.B) {
	variants := []struct {
		name string
		args []string
	}{
		{"plain", nil},
		{"pids+cpus", []string{"--pids", "1000", "--cpus", "1"}},
		{"memory+pids+cpus", []string{"--memory", "512M", "--pids", "1000", "--cpus", "1"}},
	}
	home, repo := testenv.Dir(b, "home"), testenv.Dir(b, "repo")
	times := make([][]time.Duration, len(variants))
	for b.Loop() {
		for i, v := range variants {
			args := append(append([]string{"exec", "--no-record", "--no-git-save", "--repo", repo}, v.args...), "--", "true")
			cmd := testenv.Command(b, home, testenv.Binary(b), args...)
			start := time.Now()
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("agentbox %s: %v\n%s", strings.Join(args, " "), err, out)
			}
			times[i] = append(times[i], time.Since(start))
		}
	}
	for i, v := range variants {
		slices.Sort(times[i])
		b.ReportMetric(float64(times[i][len(times[i])/2].Microseconds())/1000, "ms-median-"+v.name)
	}
}

// raiseThenFork raises every pids.max the command can reach, then forks: each
// pids.max on the host's read-only /sys/fs/cgroup (a line "WROTE path" for each
// write that took); then, in a user, mount and cgroup namespace of its own, a
// cgroup2 mount, which is rooted at the session's leaf, below the limit, where it
// raises the leaf's pids.max and a child's it makes and moves into ("NESTED step"
// for each that took, where the kernel lets it mount); then the bomb: up to 300
// sleeps in the background (docs/security.md, "The cgroup tree").
const raiseThenFork = `for f in $(find /sys/fs/cgroup -name pids.max 2>/dev/null); do (echo max > "$f") 2>/dev/null && echo "WROTE $f"; done
exec unshare -Urmc sh -c '
mkdir -p /tmp/cg
if mount -t cgroup2 none /tmp/cg 2>/dev/null; then
	echo "NESTED mount"
	(echo max > /tmp/cg/pids.max) 2>/dev/null && echo "NESTED leaf"
	mkdir /tmp/cg/x 2>/dev/null && (echo max > /tmp/cg/x/pids.max) 2>/dev/null && (echo $$ > /tmp/cg/x/cgroup.procs) 2>/dev/null && echo "NESTED child"
fi
i=0; while [ $i -lt 300 ]; do sleep 3 & i=$((i+1)); done; wait'`
