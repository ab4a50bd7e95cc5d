package nsinit

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/mounts"
)

// TestCovers runs the plan's ReadOnly and Mask operations through both inits (the raw
// init where it runs, the Go init always; the phases say which ran): /proc/sys read-
// only (a write fails with EROFS, not with the EACCES a user gets without the cover),
// /proc/keys and a directory masked (empty), a missing destination skipped, and
// /proc itself read-only at the end (as for a root session).
func TestCovers(t *testing.T) {
	if !testenv.AsTestUser(t) {
		return
	}
	script := `echo x 2>&1 > /proc/sys/kernel/core_pattern | grep -o 'Read-only file system'
		echo "keys:$(cat /proc/keys 2>&1 | wc -c)"
		echo "bus:$(ls -A /proc/bus | wc -l)"
		grep -q ' /proc/sys ro,' /proc/self/mountinfo && echo sys-ro
		awk '$5=="/proc"{o=$6} END{print substr(o, 1, 3)}' /proc/self/mountinfo`
	plan := minimalPlan("/bin/sh", "-c", script)
	plan.Ops = append(plan.Ops,
		mounts.Op{Kind: mounts.ReadOnly, Dest: "/proc/sys"},
		mounts.Op{Kind: mounts.ReadOnly, Dest: "/proc/agentbox-no-such-file"},
		mounts.Op{Kind: mounts.Mask, Dest: "/proc/keys"},
		mounts.Op{Kind: mounts.Mask, Dest: "/proc/bus"},
		mounts.Op{Kind: mounts.Mask, Dest: "/proc/agentbox-no-such-file"},
		mounts.Op{Kind: mounts.ReadOnly, Dest: "/proc"},
	)
	if _, err := os.Stat("/proc/bus"); err != nil {
		t.Fatalf("this kernel has no /proc/bus: %v", err)
	}
	for _, raw := range []bool{true, false} {
		out, err := os.Create(t.TempDir() + "/stdout")
		if err != nil {
			t.Fatal(err)
		}
		null := devNull(t)
		res, err := Run(plan, Options{Stdio: Stdio{Stdin: null, Stdout: out, Stderr: null}, RawInit: raw})
		got, _ := os.ReadFile(out.Name())
		out.Close()
		want := "Read-only file system\nkeys:0\nbus:0\nsys-ro\nro,\n"
		if err != nil || res.Status != 0 || string(got) != want {
			t.Errorf("raw %v: %v, status %d, printed %q, want %q", raw, err, res.Status, got, want)
		}
		// Which init ran: the raw one times its id maps, the Go one its start.
		wantRaw := raw && rawUsable()
		if ran := slices.Contains(phaseNames(res), "idmap"); ran != wantRaw {
			t.Errorf("raw %v: phases %s: raw init ran %v, want %v", raw, strings.Join(phaseNames(res), ","), ran, wantRaw)
		}
	}
}
