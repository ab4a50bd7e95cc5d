package adversarial

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// PID 1 of the sandbox (the raw init, or the Go init under bwrap and through the Go
// API) must not be ended, stopped or crashed from inside, and the audit must run
// whatever becomes of it (docs/security.md, "PID 1 and the audit").

func init() {
	probes["pid1"] = probePID1
	attacks = append(attacks, attack{
		name:  "plant a commondir and kill PID 1 at once",
		setup: evilCommonDir,
		// The plant and the kills are the command's first steps, in builtins: they
		// race the init's report that the command started. A killed init used to
		// make the launcher skip the audit and delete its journal.
		script: `echo "$REPO/evil.git" > .git/commondir
		kill -TERM 1; kill -SEGV 1; kill -HUP 1; kill -INT 1; kill -QUIT 1; kill -ABRT 1
		"$PROBE" pid1
		echo DONE`,
		check: func(t *testing.T, x *target, r sandboxtest.Result) {
			plantQuarantined(t, x, r, filepath.Join(x.Repo, ".git/commondir"))
			noTraceback(t, r)
		}})
}

// evilCommonDir puts a copy of the repository's Git directory in the working tree
// whose config runs a program on the operator's next `git status`: a commondir
// naming it is a live plant.
func evilCommonDir(t *testing.T, x *target) []string {
	evil := filepath.Join(x.Repo, "evil.git")
	if out, err := exec.Command("cp", "-a", filepath.Join(x.Repo, ".git"), evil).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
	f, err := os.OpenFile(filepath.Join(evil, "config"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "[core]\n\tfsmonitor = \"touch %s/fsmonitor-ran; false\"\n", x.Pwned)
	f.Close()
	testenv.Chown(t, x.Repo)
	return nil
}

// plantQuarantined: the audit named plant and moved it out on the host, no journal
// is left pending, and the operator's Git runs nothing.
func plantQuarantined(t *testing.T, x *target, r sandboxtest.Result, plant string) {
	t.Helper()
	if sandboxtest.Exists(plant) {
		t.Errorf("%s is still in place after the session", plant)
	}
	// Quarantined out of the repository, into the state directory (QuarantineTo):
	// a session still running could put a copy left beside it back.
	if q, _ := filepath.Glob(filepath.Join(x.Home, ".local/state/agentbox/quarantine/*") + plant); len(q) != 1 {
		t.Errorf("%s: quarantined copies %v, want one below the state directory", plant, q)
	}
	if !strings.Contains(r.Stderr, "agentbox: audit: "+plant) {
		t.Errorf("the audit did not report %s:\n%s", plant, r.Stderr)
	}
	if j, _ := filepath.Glob(filepath.Join(x.Home, ".local/state/agentbox/audit-pending/*")); len(j) != 0 {
		t.Errorf("journals left pending after an audited session: %v", j)
	}
	operatorGitRunsNothing(t, x)
}

// noTraceback: nothing on stderr reads like a Go runtime's crash report.
func noTraceback(t *testing.T, r sandboxtest.Result) {
	t.Helper()
	for _, s := range []string{"goroutine ", "SIGSEGV", "SIGQUIT", "SIGABRT", "fatal error", "panic:", "PC="} {
		if strings.Contains(r.Stderr, s) {
			t.Errorf("a crash report on the operator's terminal (%q):\n%s", s, r.Stderr)
			return
		}
	}
}

// TestPID1Signals: every signal, sent to PID 1 from inside every way the kernel
// offers (kill, sigqueue, tgkill to each of its threads, pidfd_send_signal), and the
// other handles on a process of the same uid (limits, OOM score, memory, descriptors)
// neither end, stop nor crash it: the session goes on, the launcher's own forwarding
// still reaches the command, and agentbox exits with the command's status and no
// crash report.
func TestPID1Signals(t *testing.T) {
	pr := probe(t)
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			x := newTarget(t, backend)
			ready := filepath.Join(x.Repo, "ready")
			cmd := x.Command(x.Repo, []string{"--no-git-save", "--no-record"}, `grep SigCgt /proc/1/status
				s=1
				while [ $s -le 64 ]; do kill -$s 1 2>/dev/null; s=$((s+1)); done
				"$PROBE" pid1
				trap 'echo FORWARDED TERM; exit 9' TERM
				touch ready
				while :; do sleep 0.05; done`)
			cmd.Env = append(cmd.Env, "PROBE="+pr, probeEnv+"=1")
			res := make(chan sandboxtest.Result, 1)
			if err := sandboxtest.StartAndCollect(cmd, res); err != nil {
				t.Fatal(err)
			}
			if !sandboxtest.WaitFor(func() bool { return sandboxtest.Exists(ready) }) {
				_ = cmd.Process.Kill()
				t.Fatalf("the session did not get past the attacks:\n%s", <-res)
			}
			// The operator's Ctrl-C or kill: the launcher forwards it to the command.
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			r := <-res
			countAttempts(r.Stdout)
			if r.Code != 9 || !strings.Contains(r.Stdout, "FORWARDED TERM") {
				t.Errorf("after the attacks, a forwarded SIGTERM: exit %d, want the command's 9:\n%s", r.Code, r)
			}
			if !strings.Contains(r.Stdout, "SigCgt:\t0000000000000000\n") {
				t.Errorf("PID 1 catches signals:\n%s", r.Stdout)
			}
			if strings.Contains(r.Stdout, "ESCAPED") {
				t.Errorf("escape:\n%s", grepLines(r.Stdout, "ESCAPED"))
			}
			if !strings.Contains(r.Stdout, "PID 1 alive after 64 signals") {
				t.Errorf("the probe did not run to its end:\n%s", r)
			}
			noTraceback(t, r)
			if t.Failed() || testing.Verbose() {
				t.Logf("session output:\n%s", r)
			}
		})
	}
}

// TestAuditAfterInitDied: once anything of the sandbox's may have run, the audit runs
// and its journal stays until it has, however the backend ends. Here bwrap is a
// stand-in that reports its child, writes a plant as the sandbox would have, and dies
// before agentbox's init reports the command's start (as an init killed from inside
// once did). The launch fails (125), and the audit still quarantines the plant.
func TestAuditAfterInitDied(t *testing.T) {
	x := newTarget(t, "bwrap")
	evilCommonDir(t, x)
	plant := filepath.Join(x.Repo, ".git/commondir")
	fake := filepath.Join(testenv.Dir(t, "fakebwrap"), "bwrap")
	script := fmt.Sprintf(`#!/bin/sh
if [ "$1" = --version ]; then echo 'bubblewrap 0.12.0'; exit 0; fi
printf '{ "child-pid": %%d }\n' $$ >&3
echo %s > %s
kill -KILL $$
`, filepath.Join(x.Repo, "evil.git"), plant)
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	testenv.Chown(t, filepath.Dir(fake))
	cmd := x.Command(x.Repo, []string{"--no-git-save", "--no-record"}, "echo ran")
	cmd.Env = append(cmd.Env, "AGENTBOX_BWRAP="+fake)
	r := sandboxtest.Run(cmd)
	if r.Code != 125 || strings.Contains(r.Stdout, "ran") {
		t.Fatalf("a backend that died before the command's start: want exit 125 and no command:\n%s", r)
	}
	plantQuarantined(t, x, r, plant)
}

// probePID1 attacks PID 1 with every signal through every sending call, then with
// the other handles on a process of the same uid, and says whether it is still there
// (a PID 1 that ended would have taken the probe with it).
func probePID1(args []string) int {
	tids := func() []int {
		var out []int
		ents, _ := os.ReadDir("/proc/1/task")
		for _, e := range ents {
			if n, err := strconv.Atoi(e.Name()); err == nil {
				out = append(out, n)
			}
		}
		return out
	}
	pidfd, err := unix.PidfdOpen(1, 0)
	if err != nil {
		fmt.Printf("pidfd_open 1: %v\n", err)
		pidfd = -1
	}
	// siginfo_t with si_code SI_QUEUE (-1): what sigqueue(3) sends. The Go runtime
	// takes a SIGSEGV of that code for a fault of its own, whatever is registered.
	info := func(sig int) *[128]byte {
		var b [128]byte
		*(*int32)(unsafe.Pointer(&b[0])) = int32(sig)
		*(*int32)(unsafe.Pointer(&b[8])) = -1
		return &b
	}
	for sig := 1; sig <= 64; sig++ {
		_ = unix.Kill(1, syscall.Signal(sig))
		_, _, _ = unix.Syscall(unix.SYS_RT_SIGQUEUEINFO, 1, uintptr(sig), uintptr(unsafe.Pointer(info(sig))))
		for _, tid := range tids() {
			_ = unix.Tgkill(1, tid, syscall.Signal(sig))
			_, _, _ = unix.Syscall6(unix.SYS_RT_TGSIGQUEUEINFO, 1, uintptr(tid), uintptr(sig), uintptr(unsafe.Pointer(info(sig))), 0, 0)
		}
		if pidfd >= 0 {
			_, _, _ = unix.Syscall6(unix.SYS_PIDFD_SEND_SIGNAL, uintptr(pidfd), uintptr(sig), uintptr(unsafe.Pointer(info(sig))), 0, 0, 0)
		}
		if st := pid1State(); st != "S" && st != "R" && st != "D" {
			fmt.Printf("ESCAPED PID 1 is %q after signal %d\n", st, sig)
			return 0
		}
	}
	fmt.Printf("PID 1 alive after 64 signals, state %s, %d threads\n", pid1State(), len(tids()))

	for _, l := range []struct {
		name string
		res  int
		lim  unix.Rlimit
	}{
		{"RLIMIT_CPU 1s", unix.RLIMIT_CPU, unix.Rlimit{Cur: 1, Max: 1}},
		{"RLIMIT_AS 1MiB", unix.RLIMIT_AS, unix.Rlimit{Cur: 1 << 20, Max: 1 << 20}},
		{"RLIMIT_NOFILE 1", unix.RLIMIT_NOFILE, unix.Rlimit{Cur: 1, Max: 1}},
		{"RLIMIT_NPROC 1", unix.RLIMIT_NPROC, unix.Rlimit{Cur: 1, Max: 1}},
	} {
		report("prlimit PID 1 "+l.name, unix.Prlimit(1, l.res, &l.lim, nil))
		// A process's limits are its threads' too: a Go init's other threads are
		// handles on it with pids other than 1.
		for _, tid := range tids() {
			if tid != 1 {
				report(fmt.Sprintf("prlimit PID 1's thread %d %s", tid, l.name), unix.Prlimit(tid, l.res, &l.lim, nil))
			}
		}
	}
	for _, f := range []string{"/proc/1/oom_score_adj", "/proc/1/oom_adj"} {
		err := os.WriteFile(f, []byte("15\n"), 0)
		if err == nil {
			if b, _ := os.ReadFile(f); strings.TrimSpace(string(b)) == "0" || len(b) == 0 {
				err = fmt.Errorf("written, but %q is what reads back", b)
			}
		}
		report("raise PID 1's OOM score through "+f, err)
	}
	mem, err := os.OpenFile("/proc/1/mem", os.O_RDWR, 0)
	if err == nil {
		mem.Close()
	}
	report("open /proc/1/mem read-write", err)
	buf := []byte{0}
	local := []unix.Iovec{{Base: &buf[0], Len: 1}}
	remote := []unix.RemoteIovec{{Base: 0x10000, Len: 1}}
	_, err = unix.ProcessVMWritev(1, local, remote, 0)
	if err == unix.EFAULT {
		err = nil // past the permission check: only the address was wrong
	}
	report("process_vm_writev into PID 1", err)
	if pidfd >= 0 {
		for fd := 0; fd < 8; fd++ {
			got, _, e := unix.Syscall(unix.SYS_PIDFD_GETFD, uintptr(pidfd), uintptr(fd), 0)
			if e == 0 {
				unix.Close(int(got))
				report(fmt.Sprintf("pidfd_getfd PID 1's descriptor %d", fd), nil)
			} else if e != unix.EBADF {
				report(fmt.Sprintf("pidfd_getfd PID 1's descriptor %d", fd), e)
			}
		}
	}
	if st := pid1State(); st != "S" && st != "R" && st != "D" {
		fmt.Printf("ESCAPED PID 1 is %q after the other attacks\n", st)
	}
	return 0
}

// pid1State is the state letter of PID 1 (/proc/1/stat), "gone" when it cannot be read.
func pid1State() string {
	b, err := os.ReadFile("/proc/1/stat")
	if err != nil {
		return "gone"
	}
	s := string(b)
	if f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]); len(f) > 0 {
		return f[0]
	}
	return "unreadable"
}

// killLauncherMidSession runs script in a session of x, then SIGKILLs the
// launcher while the session sleeps, and waits until the sandbox is gone with it:
// the launcher's end audit never ran, and its journal stays for the next launch.
// flags are further exec flags.
func killLauncherMidSession(t *testing.T, x *target, script string, flags ...string) {
	t.Helper()
	killLauncherIn(t, x, x.Repo, script, flags...)
}

// killLauncherIn is killLauncherMidSession for a session in dir.
func killLauncherIn(t *testing.T, x *target, dir, script string, flags ...string) {
	t.Helper()
	marker := "agentbox-killed-" + filepath.Base(x.Home)
	cmd := x.Command(dir, append([]string{"--no-git-save", "--no-record"}, flags...),
		script+`; exec bash -c 'exec -a `+marker+` sleep 300'`)
	res := make(chan sandboxtest.Result, 1)
	if err := sandboxtest.StartAndCollect(cmd, res); err != nil {
		t.Fatal(err)
	}
	if !sandboxtest.WaitFor(func() bool { return len(sandboxtest.Pgrep(marker)) == 1 }) {
		_ = cmd.Process.Kill()
		t.Fatalf("session never started: %s", <-res)
	}
	_ = cmd.Process.Kill()
	<-res
	if !sandboxtest.WaitForUpTo(sandboxtest.GoneBound, func() bool { return len(sandboxtest.Pgrep(marker)) == 0 }) {
		t.Fatalf("the sandbox outlived its launcher: %v", sandboxtest.Pgrep(marker))
	}
}

// TestKilledLauncherAuditedLater: a launcher killed (SIGKILL) mid-session leaves its
// journal, and the next `agentbox exec` in the repository, or `agentbox audit`, runs
// the missed audit against the session's baseline: the plant is moved aside, the
// journal goes.
func TestKilledLauncherAuditedLater(t *testing.T) {
	for _, backend := range sandboxtest.Backends(t) {
		for _, next := range []string{"exec", "audit"} {
			t.Run(backend+"/"+next, func(t *testing.T) {
				x := newTarget(t, backend)
				evilCommonDir(t, x)
				plant := filepath.Join(x.Repo, ".git/commondir")
				killLauncherMidSession(t, x, `echo "$REPO/evil.git" > .git/commondir; touch ready`)
				journals := filepath.Join(x.Home, ".local/state/agentbox/audit-pending/*.journal")
				if j, _ := filepath.Glob(journals); len(j) != 1 || !sandboxtest.Exists(plant) {
					t.Fatalf("after the launcher's death: journals %v, plant there: %v; want one journal and the plant", j, sandboxtest.Exists(plant))
				}
				var r sandboxtest.Result
				if next == "exec" {
					r = sandboxtest.Run(x.Command(x.Repo, []string{"--no-git-save", "--no-record"}, "true"))
				} else {
					r = sandboxtest.Run(x.Agentbox(x.Repo, "audit", "--repo", x.Repo))
				}
				if !strings.Contains(r.Stderr, "was killed before its audit; audited now: 1 finding(s)") {
					t.Errorf("agentbox %s after a killed launcher: the missed audit did not run:\n%s", next, r)
				}
				plantQuarantined(t, x, r, plant)
			})
		}
	}
}
