//go:build !race

package nsinit

import (
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/nsinit/protocol"
)

// Tests of the raw init's own machinery (its loop, its gate, its compiler), which a
// -race build does not have (rawlaunch_other_linux.go).

// childrenOf lists the PIDs whose parent is pid.
func childrenOf(pid int) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid …: comm may hold anything, and ends at the last ')'.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, child)
		}
	}
	return out
}

// The raw init's loop goes on when poll(2) itself fails: with RLIMIT_NOFILE set to 1
// on it (from the host: the command may not, internal/seccomp), every poll fails with
// EINVAL. It once spun on that at 100% CPU and never saw the command end. The
// command makes the init wake (an orphan exits), then exits 5 itself: the session
// must end with 5.
func TestRawSuperviseWhenPollFails(t *testing.T) {
	if !testenv.AsTestUser(t) {
		return
	}
	if !rawUsable() {
		testenv.SkipKernel(t, "mount_setattr", "the raw init needs Linux 5.12")
	}
	shared := t.TempDir()
	null := devNull(t)
	plan := minimalPlan("/bin/sh", "-c", `touch /tmp/shared/ready
		while [ ! -e /tmp/shared/go ]; do sleep 0.02; done
		sh -c 'sleep 0.05 &'
		sleep 0.5
		exit 5`)
	plan.Ops = append(plan.Ops, mounts.Op{Kind: mounts.Bind, Source: shared, Dest: "/tmp/shared"})
	type ran struct {
		res Result
		err error
	}
	done := make(chan ran, 1)
	go func() {
		res, err := Run(plan, Options{Stdio: Stdio{Stdin: null, Stdout: null, Stderr: null}, RawInit: true})
		done <- ran{res, err}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !fileExists(shared+"/ready") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	kids := childrenOf(os.Getpid())
	if len(kids) != 1 {
		t.Fatalf("the init: children of the launcher %v, want one", kids)
	}
	lim := unix.Rlimit{Cur: 1, Max: 1 << 20}
	var old unix.Rlimit
	if err := unix.Prlimit(kids[0], unix.RLIMIT_NOFILE, nil, &old); err != nil {
		t.Fatal(err)
	}
	lim.Max = old.Max
	if err := unix.Prlimit(kids[0], unix.RLIMIT_NOFILE, &lim, nil); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(shared+"/go", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.err != nil || r.res.Status != 5 || !slices.Contains(phaseNames(r.res), "idmap") {
			t.Errorf("raw init without poll: %v, status %d, phases %v; want 5 from the raw init", r.err, r.res.Status, phaseNames(r.res))
		}
	case <-time.After(20 * time.Second):
		// Leave the stuck init to the test binary's end (Pdeathsig).
		t.Fatal("the raw init never saw its command end once poll failed")
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// The raw init waiting at its gate takes only a recGo as the go: another record (a
// signal forwarded too early, a launcher out of step) ends the launch with a setup
// error, and the command never starts. It once took any full record for the go.
func TestRawGateWantsGo(t *testing.T) {
	if !testenv.AsTestUser(t) {
		return
	}
	if !rawUsable() {
		testenv.SkipKernel(t, "mount_setattr", "the raw init needs Linux 5.12")
	}
	// The previous test's raw init gives the reservation back when it is reaped, a
	// moment after its launch returned (longer in a slow VM): wait for that, bounded.
	for deadline := time.Now().Add(20 * time.Second); !rawAcquire(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("raw init still busy 20 s after the previous launch returned")
		}
	}
	shared := t.TempDir()
	null := devNull(t)
	plan := minimalPlan("/bin/sh", "-c", "touch /tmp/shared/ran")
	plan.Ops = append(plan.Ops, mounts.Op{Kind: mounts.Bind, Source: shared, Dest: "/tmp/shared"})
	prog, err := compileRaw(plan, os.Environ(), true)
	if err != nil {
		rawRelease()
		t.Fatal(err)
	}
	ctl, child, err := ControlSocket()
	if err != nil {
		rawRelease()
		t.Fatal(err)
	}
	proc, err := prog.start(child, Stdio{Stdin: null, Stdout: null, Stderr: null}, false, cloneFlags(plan), -1)
	child.Close()
	if err != nil {
		t.Fatal(err)
	}
	conn := &rawConn{ctl: ctl, prog: prog}
	if err := conn.send(recSignal, uint32(unix.SIGTERM)); err != nil {
		t.Fatal(err)
	}
	m, err := conn.read()
	ctl.Close() // an init that went on ends its session at this EOF
	st := proc.wait()
	if err != nil || m.Type != protocol.MsgError || m.Step != PhaseGate || !strings.Contains(m.Reason, "bad message") {
		t.Errorf("a signal record at the gate: %+v, %v; want the gate's error, bad message", m, err)
	}
	if st.status() != exitSetup || fileExists(shared+"/ran") {
		t.Errorf("a signal record at the gate: the init ended with %v, the command ran: %v", st, fileExists(shared+"/ran"))
	}
}

// BenchmarkRawCompile is the launcher's side of the raw init for the default plan of
// a repository in HOME: the arena, the id maps and the wait (PrestartRaw), then the
// plan's system calls (RunPrestarted), warm.
func BenchmarkRawCompile(b *testing.B) {
	home := b.TempDir()
	repo := home + "/repo"
	plan := mounts.Plan{
		Ops: []mounts.Op{
			{Kind: mounts.BindRO, Source: "/", Dest: "/"},
			{Kind: mounts.Proc, Dest: "/proc"},
			{Kind: mounts.Dev, Dest: "/dev"},
			{Kind: mounts.Tmpfs, Dest: "/tmp", Mode: 0o1777},
			{Kind: mounts.Tmpfs, Dest: "/run", Mode: 0o755},
			{Kind: mounts.Overlay, Source: home, Dest: home},
			{Kind: mounts.Bind, Source: repo, Dest: repo},
			{Kind: mounts.Tmpfs, Dest: "/run/agentbox/pushguard", Mode: 0o755},
			{Kind: mounts.BindRO, Source: "/usr/bin", Dest: "/run/agentbox/pushguard"},
			{Kind: mounts.BindRO, Source: "/bin/true", Dest: "/usr/bin/true"},
		},
		Workdir: repo,
		Command: []string{"true"},
	}
	env := os.Environ()
	b.ReportAllocs()
	for b.Loop() {
		p, err := newRawProgram(stringsSize(env, nil))
		if err != nil {
			b.Fatal(err)
		}
		p.CompileIDMap(os.Getuid(), os.Getgid(), true)
		p.compileWait()
		if err := p.compilePlan(plan, env, true); err != nil {
			b.Fatal(err)
		}
		p.free()
	}
}

// waitRawFree waits (bounded) for the previous launch's raw init to give its
// reservation back: it is reaped a moment after its launch returned, and a launch
// meanwhile gets the Go init. Where the raw init cannot run (before Linux 5.12)
// there is nothing to wait for.
func waitRawFree(t *testing.T) { waitRawFreeB(t) }

func waitRawFreeB(t testing.TB) {
	t.Helper()
	if !rawUsable() {
		return
	}
	for deadline := time.Now().Add(20 * time.Second); !rawAcquire(); runtime.Gosched() {
		if time.Now().After(deadline) {
			t.Fatal("raw init still busy 20 s after the previous launch returned")
		}
	}
	rawRelease()
}
