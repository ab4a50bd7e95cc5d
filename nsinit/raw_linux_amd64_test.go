package nsinit

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testenv"
	"github.com/agentbox/agentbox/mounts"
)

func minimalPlan(cmd ...string) mounts.Plan {
	return mounts.Plan{
		Ops: []mounts.Op{
			{Kind: mounts.BindRO, Source: "/", Dest: "/"},
			{Kind: mounts.Proc, Dest: "/proc"},
			{Kind: mounts.Dev, Dest: "/dev"},
			{Kind: mounts.Tmpfs, Dest: "/tmp", Mode: 0o1777},
		},
		Workdir: "/",
		Command: cmd,
	}
}

// devNull is /dev/null opened for reading and writing, closed with the test.
func devNull(t *testing.T) *os.File {
	t.Helper()
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { null.Close() })
	return null
}

func phaseNames(res Result) []string {
	var names []string
	for _, p := range res.Phases {
		names = append(names, p.Name)
	}
	return names
}

// A raw init shares the launcher's memory and makes it non-dumpable. A second launch
// in the same process (agentbox exec after its spare was discarded) must still start:
// raw again once the first is reaped (its id maps need the process dumpable again),
// the Go init while the first may still share the memory.
func TestRawInitTwiceInOneProcess(t *testing.T) {
	if !testenv.AsTestUser(t) {
		return
	}
	null := devNull(t)
	opts := Options{Stdio: Stdio{Stdin: null, Stdout: null, Stderr: null}, RawInit: true}
	if !rawUsable() {
		// Before Linux 5.12 (the kernel matrix's 5.10 cells) the Go init runs instead.
		res, err := Run(minimalPlan("/bin/sh", "-c", "exit 3"), opts)
		if err != nil || res.Status != 3 || !slices.Contains(phaseNames(res), "init-start") || PrestartRaw(false, opts.Stdio) != nil {
			t.Fatalf("without the raw init's system calls: %v, status %d, phases %v", err, res.Status, phaseNames(res))
		}
		return
	}

	spare := PrestartRaw(false, opts.Stdio)
	if spare == nil {
		t.Fatal("PrestartRaw: no spare")
	}
	// While the spare lives, a fresh launch gets the Go init.
	res, err := Run(minimalPlan("/bin/sh", "-c", "exit 3"), opts)
	if err != nil || res.Status != 3 || !slices.Contains(phaseNames(res), "init-start") {
		t.Fatalf("launch beside a live raw spare: %v, status %d, phases %v", err, res.Status, phaseNames(res))
	}
	spare.Discard()
	// Once it is reaped, a fresh launch is raw again, and works.
	res, err = Run(minimalPlan("/bin/sh", "-c", "exit 4"), opts)
	if err != nil || res.Status != 4 || !slices.Contains(phaseNames(res), "idmap") {
		t.Fatalf("raw launch after a discarded spare: %v, status %d, phases %v", err, res.Status, phaseNames(res))
	}
}

// The raw init's failures read as the Go init's: the step, then the operation, the
// path and the errno (a symlink in the path named as such).
func TestRawInitReportsFailuresAsTheGoInit(t *testing.T) {
	if !testenv.AsTestUser(t) {
		return
	}
	// Where the raw init cannot run, the Go init does: the same reports either way.
	dir := t.TempDir()
	link := dir + "/link"
	if err := os.Symlink("/etc", link); err != nil {
		t.Fatal(err)
	}
	null := devNull(t)
	opts := Options{Stdio: Stdio{Stdin: null, Stdout: null, Stderr: null}, RawInit: true}
	for _, c := range []struct {
		source, want string
	}{
		{dir + "/missing", "mount: open " + dir + "/missing: no such file or directory"},
		{link + "/passwd", "mount: open " + link + "/passwd: path component is a symlink"},
	} {
		plan := minimalPlan("/bin/true")
		plan.Ops = append(plan.Ops, mounts.Op{Kind: mounts.BindRO, Source: c.source, Dest: "/etc/hostname"})
		res, err := Run(plan, opts)
		if err == nil || err.Error() != c.want || !slices.Contains(phaseNames(res), PhaseClone) {
			t.Errorf("bind of %s: %v, want %q", c.source, err, c.want)
		}
	}
	plan := minimalPlan("no-such-command-anywhere")
	if _, err := Run(plan, opts); err == nil || err.Error() != "command no-such-command-anywhere: not found in PATH" {
		t.Errorf("missing command: %v", err)
	}
}

// Options.BeforeExec: the command starts only after it, and sees what it did; an
// error ends the launch before the command, and is the launch's error. The raw init
// waits for it with its sandbox built; the Go init starts after it.
func TestBeforeExec(t *testing.T) {
	if !testenv.AsTestUser(t) {
		return
	}
	for _, raw := range []bool{true, false} {
		dir := t.TempDir()
		out, err := os.Create(dir + "/stdout")
		if err != nil {
			t.Fatal(err)
		}
		null := devNull(t)
		shared := t.TempDir() // the sandbox sees it at /tmp/shared (on its tmpfs: kernel-matrix VMs have no /mnt)
		plan := minimalPlan("/bin/sh", "-c", "cat /tmp/shared/baseline")
		plan.Ops = append(plan.Ops, mounts.Op{Kind: mounts.Bind, Source: shared, Dest: "/tmp/shared"})
		opts := Options{Stdio: Stdio{Stdin: null, Stdout: out, Stderr: null}, RawInit: raw}
		opts.BeforeExec = func() error {
			// Long enough for a sandbox that did not wait to have run its command.
			time.Sleep(100 * time.Millisecond)
			return os.WriteFile(shared+"/baseline", []byte("taken\n"), 0o644)
		}
		res, err := Run(plan, opts)
		got, _ := os.ReadFile(out.Name())
		if err != nil || res.Status != 0 || string(got) != "taken\n" {
			t.Errorf("raw %v: %v, status %d, the command printed %q, want the file BeforeExec wrote", raw, err, res.Status, got)
		}
		if gate := slices.Contains(phaseNames(res), PhaseGate); gate != (raw && rawUsable()) {
			t.Errorf("raw %v: phases %v: the init waited for BeforeExec: %v", raw, phaseNames(res), gate)
		}

		// A failing BeforeExec: no command, no init left, its error.
		refused := errors.New("no baseline")
		plan.Command = []string{"/bin/sh", "-c", "echo ran"}
		opts.BeforeExec = func() error { return refused }
		if err := out.Truncate(0); err != nil {
			t.Fatal(err)
		}
		res, err = Run(plan, opts)
		got, _ = os.ReadFile(out.Name())
		if !errors.Is(err, refused) || len(got) != 0 {
			t.Errorf("raw %v, BeforeExec failing: %v, the command printed %q; want %v and no command", raw, err, got, refused)
		}
		if res.InitPID != 0 {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", res.InitPID)); err == nil {
				t.Errorf("raw %v: init %d still there after BeforeExec failed", raw, res.InitPID)
			}
		}
		out.Close()
	}
}

// A bind source whose identity is not the one the launcher verified (Op.SourceID) is
// refused by both inits, with the same words; the right one is bound.
func TestSourceIDChecked(t *testing.T) {
	if !testenv.AsTestUser(t) {
		return
	}
	null := devNull(t)
	dir, other := t.TempDir(), t.TempDir()
	id := func(p string) mounts.FileID {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		return mounts.FileID{Dev: st.Dev, Ino: st.Ino}
	}
	for _, raw := range []bool{true, false} {
		opts := Options{Stdio: Stdio{Stdin: null, Stdout: null, Stderr: null}, RawInit: raw}
		plan := minimalPlan("/bin/true")
		plan.Ops = append(plan.Ops, mounts.Op{Kind: mounts.Bind, Source: dir, Dest: "/tmp/src", SourceID: id(other)})
		want := "mount: open " + dir + ": " + ErrSourceChanged.Error()
		if _, err := Run(plan, opts); err == nil || err.Error() != want {
			t.Errorf("raw %v: a source with another identity: %v, want %q", raw, err, want)
		}
		plan.Ops[len(plan.Ops)-1].SourceID = id(dir)
		if res, err := Run(plan, opts); err != nil || res.Status != 0 {
			t.Errorf("raw %v: the verified source: %v, status %d", raw, err, res.Status)
		}
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
		p.compileIDMap()
		p.compileWait()
		if err := p.compilePlan(plan, env, true); err != nil {
			b.Fatal(err)
		}
		p.free()
	}
}

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
// on it (from the host: the command may not, ttyfilter), every poll fails with
// EINVAL. It once spun on that at 100% CPU and never saw the command end. The
// command makes the init wake (an orphan exits), then exits 5 itself: the session
// must end with 5.
func TestRawSuperviseWhenPollFails(t *testing.T) {
	if !testenv.AsTestUser(t) {
		return
	}
	if !rawUsable() {
		testenv.Skip(t, "the raw init needs Linux 5.12")
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
		testenv.Skip(t, "the raw init needs Linux 5.12")
	}
	if !rawAcquire() {
		t.Fatal("raw init busy")
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
	proc, err := prog.start(child, Stdio{Stdin: null, Stdout: null, Stderr: null}, false, cloneFlags(plan))
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
	if err != nil || m.Type != msgError || m.Step != PhaseGate || !strings.Contains(m.Reason, "bad message") {
		t.Errorf("a signal record at the gate: %+v, %v; want the gate's error, bad message", m, err)
	}
	if st.status() != exitSetup || fileExists(shared+"/ran") {
		t.Errorf("a signal record at the gate: the init ended with %v, the command ran: %v", st, fileExists(shared+"/ran"))
	}
}
