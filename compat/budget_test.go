package compat

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/mounts/build"
	"github.com/agentbox/agentbox/policy"
)

// TestInitBudget: with a TmpSize, the launch's argv binds the RAM-backed
// filesystems from directories of the one budget (their modes what the plan
// says), takes HOME's upper and work directories from it, and makes bwrap's own
// /dev read-only after everything below it; bwrap run alone (Command) keeps one
// sized tmpfs each.
func TestInitBudget(t *testing.T) {
	p := &policy.Policy{
		Repo: "/home/u/repo", Home: "/home/u", Workdir: "/home/u/repo", TmpSize: 8 << 20,
		Backend: policy.BackendBwrap, Command: []string{"true"},
		Devices: []policy.Device{{Path: "/dev/dri/renderD128", From: "--gpu"}},
	}
	plan := build.Plan(p, mounts.Session{})
	g, sources, budget, err := initGroups("/opt/bwrap", plan, "/opt/agentbox", fakeLower)
	if err != nil {
		t.Fatal(err)
	}
	argv := strings.Join(slices.Concat(g...), " ")
	for _, want := range []string{
		"--dev /dev --bind /run/0 /dev/shm --dev-bind /proc/self/fd/6 /dev/dri/renderD128",
		"--bind /run/1 /tmp --bind /run/2 /run",
		"--overlay-src /home/u --overlay /run/3 /run/4 /home/u --chmod 0750 /home/u",
		"--remount-ro /dev --ro-bind /opt/agentbox " + InitPath,
	} {
		if !strings.Contains(argv, want) {
			t.Errorf("argv lacks %q:\n%s", want, argv)
		}
	}
	if strings.Contains(argv, "--tmpfs") || strings.Contains(argv, "--size") || strings.Contains(argv, budgetBind) {
		t.Errorf("a tmpfs of its own, or a pseudo-option left:\n%s", argv)
	}
	if want := (&Budget{Size: 8 << 20, Modes: []uint32{0o1777, 0o1777, 0o755, 0o755, 0o700}}); !reflect.DeepEqual(budget, want) {
		t.Errorf("budget %+v, want %+v", budget, want)
	}
	if sources[0] != "/dev/dri/renderD128" {
		t.Errorf("the device is not the first descriptor: %q", sources)
	}
	alone, err := Command("/opt/bwrap", mounts.Plan{Ops: plan.Ops[:5], TmpSize: 8 << 20, Workdir: "/", Command: []string{"true"}})
	if err != nil || !strings.Contains(strings.Join(alone, " "), "--size 8388608 --perms 1777 --tmpfs /tmp") {
		t.Errorf("bwrap alone: %q, %v; want a sized tmpfs", alone, err)
	}
}
