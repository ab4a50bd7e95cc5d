package nsinit

import (
	"os"
	"slices"
	"testing"

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
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
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
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
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
