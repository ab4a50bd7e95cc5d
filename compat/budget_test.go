package compat

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/mounts/build"
	"github.com/agentbox/agentbox/policy"
)

// TestArgvEveryKindBudget walks every operation kind through the launch's argv with
// a budget: the kinds that draw on it become its directories, "/" the stage's copy,
// every other kind keeps its translation (TestArgvEveryKind), and a plan with a
// /dev ends with bwrap's /dev made read-only.
func TestArgvEveryKindBudget(t *testing.T) {
	want := map[mounts.Kind][]string{
		mounts.Tmpfs:   {"--bind", "/dev/shm/0", "/dst"},
		mounts.Dev:     {"--dev", "/dst", "--bind", "/dev/shm/0", "/dst/shm", "--remount-ro", "/dst"},
		mounts.Overlay: {"--overlay-src", "/src", "--overlay", "/dev/shm/0/upper", "/dev/shm/0/work", "/dst", "--chmod", "0750", "/dst"},
	}
	for _, k := range mounts.Kinds {
		op := mounts.Op{Kind: k, Dest: "/dst"}
		switch k {
		case mounts.ReadOnly, mounts.Mask:
			op.Dest = "/proc/sys"
		case mounts.BindRO, mounts.Bind, mounts.Overlay, mounts.Device:
			op.Source = "/src"
		case mounts.Tmpfs:
			op.Mode = 0o750
		}
		plan := mounts.Plan{Ops: []mounts.Op{op}, Workdir: "/", Command: []string{"true"}}
		plain, err := opsArgv(plan)
		if err != nil {
			t.Fatalf("kind %s: %v", k, err)
		}
		plan.TmpSize = 8 << 20
		got, err := opsArgv(plan)
		if err != nil {
			t.Errorf("kind %s: %v", k, err)
			continue
		}
		w, ok := want[k]
		if !ok {
			w = plain
		}
		if !reflect.DeepEqual(got, w) && len(got)+len(w) > 0 {
			t.Errorf("kind %s: %q, want %q", k, got, w)
		}
	}
	// The plan's "/" is the stage's copy; a bind of "/" elsewhere is not.
	g, _, _, err := initGroups("/opt/bwrap", mounts.Plan{Ops: []mounts.Op{{Kind: mounts.BindRO, Source: "/", Dest: "/"}},
		Workdir: "/", Command: []string{"true"}, TmpSize: 8 << 20}, "/opt/agentbox", fakeLower)
	if err != nil || !strings.Contains(strings.Join(slices.Concat(g...), " "), "--ro-bind /dev/shm/root / ") {
		t.Errorf("/: %q, %v", g, err)
	}
}

// opsArgv is the part of the launch's argv that translates plan's operations.
func opsArgv(plan mounts.Plan) ([]string, error) {
	g, _, _, err := initGroups("/opt/bwrap", plan, "/opt/agentbox", fakeLower)
	if err != nil {
		return nil, err
	}
	start := slices.IndexFunc(g, func(x []string) bool { return x[0] == "--cap-drop" }) + 1
	end := slices.IndexFunc(g, func(x []string) bool { return len(x) == 3 && x[2] == InitPath })
	return slices.Concat(g[start:end]...), nil
}

// TestInitBudget: a plan built as agentbox builds it binds its RAM-backed filesystems
// from the budget's directories, with the plan's modes, takes HOME's upper and work
// directories from one, makes bwrap's /dev read-only after everything below it, and
// keeps no tmpfs of bwrap's own; bwrap run alone (Command) keeps one sized tmpfs each.
func TestInitBudget(t *testing.T) {
	p := &policy.Policy{
		Repo: "/home/u/repo", Home: "/home/u", Workdir: "/home/u/repo", TmpSize: 8 << 20,
		Backend: policy.BackendBwrap, Command: []string{"true"},
		KeepPrivate: []string{"/home/u/.claude/shell-snapshots"},
		Devices:     []policy.Device{{Path: "/dev/dri/renderD128", From: "--gpu"}},
	}
	plan := build.Plan(p, mounts.Session{})
	g, sources, budget, err := initGroups("/opt/bwrap", plan, "/opt/agentbox", fakeLower)
	if err != nil {
		t.Fatal(err)
	}
	argv := strings.Join(slices.Concat(g...), " ")
	for _, want := range []string{
		"--ro-bind /dev/shm/root / --proc /proc --dev /dev --bind /dev/shm/0 /dev/shm --dev-bind /proc/self/fd/6 /dev/dri/renderD128",
		"--bind /dev/shm/1 /tmp --bind /dev/shm/2 /run",
		"--overlay-src /home/u --overlay /dev/shm/3/upper /dev/shm/3/work /home/u --chmod 0750 /home/u",
		"--bind /dev/shm/4 /home/u/.claude/shell-snapshots",
		"--remount-ro /dev --ro-bind-fd " + fmt.Sprint(FirstSourceFD+len(sources)-1) + " " + InitPath,
	} {
		if !strings.Contains(argv, want) {
			t.Errorf("argv lacks %q:\n%s", want, argv)
		}
	}
	if strings.Contains(argv, "--tmpfs") || strings.Contains(argv, "--size") || strings.Contains(argv, stageBind) {
		t.Errorf("a tmpfs of bwrap's own, or a pseudo-option left:\n%s", argv)
	}
	want := &Budget{Size: 8 << 20, Dirs: []BudgetDir{{Mode: 0o1777}, {Mode: 0o1777}, {Mode: 0o755}, {Mode: 0o750, Overlay: true}, {Mode: 0o700}}}
	if !reflect.DeepEqual(budget, want) {
		t.Errorf("budget %+v, want %+v", budget, want)
	}
	if len(sources) == 0 || sources[0] != "/dev/dri/renderD128" {
		t.Errorf("the device is not the first descriptor: %q", sources)
	}
	alone, err := Command("/opt/bwrap", mounts.Plan{Ops: slices.Concat(plan.Ops[:3], plan.Ops[4:6]), TmpSize: 8 << 20, Workdir: "/", Command: []string{"true"}})
	if err != nil || !strings.Contains(strings.Join(alone, " "), "--size 8388608 --perms 1777 --tmpfs /tmp") {
		t.Errorf("bwrap alone: %q, %v; want a sized tmpfs", alone, err)
	}
	// The stage's command line carries the binary's descriptor and the budget whole,
	// or no budget.
	for _, b := range []*Budget{budget, nil} {
		args := stageArgs(9, b)
		fd, got, bwrap, err := parseStage(append(args[1:], "/opt/bwrap", "--version"))
		if err != nil || fd != 9 || !reflect.DeepEqual(got, b) || !reflect.DeepEqual(bwrap, []string{"/opt/bwrap", "--version"}) {
			t.Errorf("stage arguments %q read back as %d %+v %q %v", args, fd, got, bwrap, err)
		}
	}
	for _, bad := range [][]string{{"9", "8", "0755"}, {"9", "0", "0755", "--", "b"}, {"9", "8", "9", "--", "b"},
		{"9", "8", "o17777", "--", "b"}, {"9", "--", "b"}, {"--", "b"}, {"x", "8", "--", "b"}, {"2", "8", "--", "b"}, {"9", "-1", "--", "b"}} {
		if _, _, _, err := parseStage(bad); err == nil {
			t.Errorf("stage arguments %q accepted", bad)
		}
	}
	// The user limits come first, and only limits of /proc/sys/user.
	limits := []mounts.UserLimit{{Name: "max_inotify_instances", Max: 32}, {Name: "max_user_namespaces", Max: 7}}
	args := append(stageArgs(9, budget)[:1:1], limitArgs(limits)...)
	args = append(args, stageArgs(9, budget)[1:]...)
	got, rest, err := parseLimits(append(args[1:], "/opt/bwrap"))
	if err != nil || !reflect.DeepEqual(got, limits) || !reflect.DeepEqual(rest[:2], []string{"9", "8388608"}) {
		t.Errorf("stage limits %q read back as %+v %q %v", args, got, rest, err)
	}
	for _, bad := range []string{"../max_x=1", "max_x=-1", "max_x=", "max_x/y=1", "x=1"} {
		if _, _, err := parseLimits([]string{bad, "9", "0", "--", "b"}); err == nil {
			t.Errorf("stage limit %q accepted", bad)
		}
	}
}

// TestInitBudgetSources: with a budget, a host path bwrap resolves in the stage's
// namespace may not lie in StageDir, which the stage covers there.
func TestInitBudgetSources(t *testing.T) {
	plan := mounts.Plan{Ops: []mounts.Op{{Kind: mounts.BindRO, Source: "/", Dest: "/"}, {Kind: mounts.Device, Source: "/dev/shm/x", Dest: "/dev/x"}},
		Workdir: "/", Command: []string{"true"}, TmpSize: 8 << 20}
	if _, _, _, err := initGroups("/opt/bwrap", plan, "/opt/agentbox", fakeLower); err == nil || !strings.Contains(err.Error(), "/dev/shm/x lies in /dev/shm") {
		t.Errorf("a source in %s: %v", StageDir, err)
	}
	plan.Ops = plan.Ops[:1]
	if _, _, _, err := initGroups("/opt/bwrap", plan, "/dev/shm/agentbox", fakeLower); err == nil {
		t.Errorf("the agentbox binary in %s was accepted", StageDir)
	}
	plan.TmpSize = 0
	if _, _, _, err := initGroups("/opt/bwrap", plan, "/dev/shm/agentbox", fakeLower); err != nil {
		t.Errorf("without a budget: %v", err)
	}
}
