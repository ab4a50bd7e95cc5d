package nsinit

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/mounts"
)

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
		waitRawFree(t) // an earlier test's raw init, reaped in the background, shares this memory
		res, err := Run(plan, opts)
		if err == nil || err.Error() != c.want || !slices.Contains(phaseNames(res), PhaseClone) {
			t.Errorf("bind of %s: %v, want %q", c.source, err, c.want)
		}
		// The failed raw init shared this process's memory and made it
		// non-dumpable; with the init reaped, the process is dumpable again, so a
		// child it starts (the kernel probe that explains the failure) owns its
		// /proc files and can write its own id maps.
		if d, _ := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0); d != 1 {
			t.Errorf("bind of %s: the launcher is left non-dumpable (%d) after the failed launch", c.source, d)
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
		waitRawFree(t) // else the launch rightly goes to the Go init, which does not wait
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
