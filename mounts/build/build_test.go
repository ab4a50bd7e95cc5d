package build

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/policy"
)

func testPolicy(home, repo string) *policy.Policy {
	return &policy.Policy{Repo: repo, Home: home, Workdir: repo, Command: []string{"true"}, Backend: "native"}
}

func dests(p mounts.Plan) []string {
	var out []string
	for _, op := range p.Ops {
		out = append(out, string(op.Kind)+" "+op.Dest)
	}
	return out
}

func index(list []string, s string) int {
	for i, v := range list {
		if v == s {
			return i
		}
	}
	return -1
}

func TestBuildOrder(t *testing.T) {
	prot := []mounts.Protected{{Path: "/h/repo/.git/config"}, {Path: "/h/repo/.git/hooks", Dir: true}}
	plan := Plan(testPolicy("/h", "/h/repo"), mounts.Session{Protected: prot})
	got := dests(plan)
	want := []string{"ro-bind /", "proc /proc", "dev /dev", "tmpfs /tmp", "tmpfs /run",
		"overlay /h", "bind /h/repo", "ro-bind /h/repo/.git/config", "ro-bind /h/repo/.git/hooks"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("order:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if plan.Namespaces.Net {
		t.Error("network namespace without --offline")
	}
}

// TestBuildReadOnlyRepo: a --read-only repository is bound read-only; below the
// private /tmp or /run, where nothing makes its mount point but a writable bind, that
// bind comes first and is covered at once.
func TestBuildReadOnlyRepo(t *testing.T) {
	for repo, want := range map[string]string{
		"/h/repo":     "overlay /h|ro-bind /h/repo",
		"/tmp/repo":   "overlay /h|bind /tmp/repo|ro-bind /tmp/repo",
		"/run/x/repo": "overlay /h|bind /run/x/repo|ro-bind /run/x/repo",
		"/tmpx/repo":  "overlay /h|ro-bind /tmpx/repo",
	} {
		p := testPolicy("/h", repo)
		p.ReadOnly = true
		got := strings.Join(dests(Plan(p, mounts.Session{}))[5:], "|")
		if got != want {
			t.Errorf("%s: %s, want %s", repo, got, want)
		}
	}
}

// TestBuildHostRoot: a host-root sandbox gets the kernel's tunables read-only and its
// secrets masked, right after /proc and /dev (which the masks use) and before
// anything else; a user's sandbox gets none of them (they would break nested proc).
func TestBuildHostRoot(t *testing.T) {
	user := dests(Plan(testPolicy("/h", "/h/repo"), mounts.Session{}))
	root := dests(Plan(testPolicy("/h", "/h/repo"), mounts.Session{HostRoot: true}))
	for _, d := range user {
		if strings.HasPrefix(d, string(mounts.ReadOnly)+" ") || strings.HasPrefix(d, string(mounts.Mask)+" ") {
			t.Errorf("user sandbox has %q", d)
		}
	}
	want := []string{"remount-ro /proc", "mask /proc/kcore", "mask /proc/keys",
		"mask /proc/timer_list", "mask /sys/firmware", "mask /sys/devices/virtual/powercap"}
	dev, tmp := index(root, "dev /dev"), index(root, "tmpfs /tmp")
	for _, w := range want {
		if i := index(root, w); i < dev || i > tmp {
			t.Errorf("%q at %d (dev %d, tmp %d):\n%s", w, i, dev, tmp, strings.Join(root, "\n"))
		}
	}
	if len(root) != len(user)+len(readOnlyPaths)+len(maskedPaths) {
		t.Errorf("root plan has %d ops, user plan %d", len(root), len(user))
	}
}

func TestBuildRepoAfterPrivateDirs(t *testing.T) {
	// A repo below /tmp or /run, and a HOME below /tmp, stay reachable: they are
	// bound after the private mounts that would hide them.
	for _, c := range []struct{ home, repo string }{
		{"/h", "/tmp/work/repo"}, {"/h", "/run/user/1000/repo"}, {"/tmp/home", "/tmp/home/repo"},
	} {
		p := testPolicy(c.home, c.repo)
		p.DiskTmp = true
		got := dests(Plan(p, mounts.Session{DiskTmp: "/h/.cache/agentbox/tmp/x"}))
		repo := index(got, "bind "+c.repo)
		for _, before := range []string{"bind /tmp", "tmpfs /run", "overlay " + c.home, "proc /proc", "dev /dev"} {
			if i := index(got, before); i < 0 || i > repo {
				t.Errorf("%+v: %q at %d, repo at %d:\n%s", c, before, i, repo, strings.Join(got, "\n"))
			}
		}
		if index(got, "overlay "+c.home) < index(got, "bind /tmp") {
			t.Errorf("HOME overlay before /tmp: a HOME below /tmp would be hidden")
		}
	}
}

func TestBuildOptions(t *testing.T) {
	p := testPolicy("", "/srv/repo")
	p.Offline = true
	extra := []mounts.Op{{Kind: mounts.BindRO, Source: "/tmp/guard", Dest: "/run/agentbox/bin"}}
	plan := Plan(p, mounts.Session{ExtraRO: extra, HostRoot: true, Protected: []mounts.Protected{{Path: "/srv/repo/.git/config"}}})
	got := dests(plan)
	if index(got, "overlay ") >= 0 {
		t.Error("overlay without HOME")
	}
	if !plan.Namespaces.Net {
		t.Error("--offline did not ask for a network namespace")
	}
	if index(got, "ro-bind /run/agentbox/bin") < index(got, "bind /srv/repo") ||
		index(got, "ro-bind /srv/repo/.git/config") < index(got, "ro-bind /run/agentbox/bin") {
		t.Errorf("extra binds must follow the repo and precede the Git paths:\n%s", strings.Join(got, "\n"))
	}
	// Every op kind used by Build is in Kinds, which the backends' tests walk.
	for _, op := range plan.Ops {
		found := false
		for _, k := range mounts.Kinds {
			found = found || k == op.Kind
		}
		if !found {
			t.Errorf("op kind %q missing from Kinds", op.Kind)
		}
	}
}

func TestPlanRendering(t *testing.T) {
	plan := Plan(testPolicy("/h", "/h/repo"), mounts.Session{})
	text := plan.String()
	lines := strings.Split(strings.TrimSpace(text), "\n")
	if len(lines) != len(plan.Ops)+4 || !strings.HasPrefix(lines[0], "ro-bind  /") || !strings.Contains(text, "exec     true") {
		t.Fatalf("text plan:\n%s", text)
	}
	b, err := plan.JSON()
	if err != nil {
		t.Fatal(err)
	}
	var back mounts.Plan
	if err := json.Unmarshal(b, &back); err != nil || len(back.Ops) != len(plan.Ops) || back.Ops[5] != plan.Ops[5] {
		t.Fatalf("JSON round trip: %v\n%s", err, b)
	}
}

func BenchmarkPlan(b *testing.B) {
	prot := []mounts.Protected{{Path: "/h/repo/.git/config"}, {Path: "/h/repo/.git/hooks", Dir: true}}
	p := testPolicy("/h", "/h/repo")
	for b.Loop() {
		_ = Plan(p, mounts.Session{Protected: prot})
	}
}

// TestBuildKept: kept paths are writable binds right after the HOME overlay (so
// they win over it), their read-only code directories after them, and the
// repository after both.
func TestBuildKept(t *testing.T) {
	p := &policy.Policy{Repo: "/h/repo", Home: "/h", Workdir: "/h/repo", Command: []string{"sh"},
		Keep:         []policy.Kept{{Path: "/h/.claude", Dir: true, From: "--keep-agent claude"}, {Path: "/h/.claude.json", From: "--keep-agent claude"}},
		KeepReadOnly: []string{"/h/.claude/plugins"}}
	var got []string
	for _, op := range Plan(p, mounts.Session{}).Ops {
		got = append(got, string(op.Kind)+" "+op.Dest)
	}
	want := []string{"overlay /h", "bind /h/.claude", "bind /h/.claude.json", "ro-bind /h/.claude/plugins", "bind /h/repo"}
	at := -1
	for i, g := range got {
		if g == want[0] {
			at = i
		}
	}
	if at < 0 || len(got) < at+len(want) || !slices.Equal(got[at:at+len(want)], want) {
		t.Errorf("ops %q, want %q in a row", got, want)
	}
}

// --allow-net: a new network namespace, the proxy's address inside, and the
// variables that point clients at it; without it, none of them.
func TestBuildAllowNet(t *testing.T) {
	p := testPolicy("", "/srv/repo")
	if plan := Plan(p, mounts.Session{}); plan.Namespaces.Net || plan.Proxy != "" || plan.Env != nil {
		t.Errorf("no --allow-net: %+v", plan)
	}
	p.AllowNet = []string{"example.com"}
	plan := Plan(p, mounts.Session{})
	if !plan.Namespaces.Net || plan.Proxy != mounts.ProxyAddr {
		t.Errorf("--allow-net: net %t proxy %q", plan.Namespaces.Net, plan.Proxy)
	}
	env := strings.Join(plan.Env, " ")
	for _, want := range []string{"HTTPS_PROXY=http://" + mounts.ProxyAddr, "https_proxy=http://" + mounts.ProxyAddr, "ALL_PROXY=socks5h://" + mounts.ProxyAddr, "NO_PROXY=localhost,127.0.0.1,::1"} {
		if !strings.Contains(env, want) {
			t.Errorf("env %q lacks %s", env, want)
		}
	}
	if text := plan.String(); !strings.Contains(text, "proxy    "+mounts.ProxyAddr) || !strings.Contains(text, "env      HTTP_PROXY=") {
		t.Errorf("dry run does not show the proxy:\n%s", text)
	}
}

// TestBuildMaskSockets: each host socket to mask gets the null device bound
// read-only over it after the hidden paths and before the protected Git paths; the
// abstract-socket scope is in the plan only when the session says the kernel has it.
func TestBuildMaskSockets(t *testing.T) {
	prot := []mounts.Protected{{Path: "/h/repo/.git/config"}}
	plan := Plan(testPolicy("/h", "/h/repo"), mounts.Session{Protected: prot, MaskSockets: []string{"/var/snap/lxd/common/lxd/unix.socket"}, ScopeAbstractUnix: true})
	got := dests(plan)
	i, j := index(got, "ro-bind /var/snap/lxd/common/lxd/unix.socket"), index(got, "ro-bind /h/repo/.git/config")
	if i < 0 || j < i || plan.Ops[i].Source != mounts.MaskSource {
		t.Fatalf("masked socket missing or out of order:\n%s", strings.Join(got, "\n"))
	}
	// A socket's mask may be skipped if the socket is gone; nothing else may.
	for _, op := range plan.Ops {
		if op.IfExists != (op.Dest == "/var/snap/lxd/common/lxd/unix.socket") {
			t.Errorf("IfExists %v on %s", op.IfExists, op)
		}
	}
	if !plan.ScopeAbstractUnix || !strings.Contains(plan.String(), "landlock scope abstract-unix") {
		t.Errorf("abstract-socket scope not in the plan:\n%s", plan)
	}
	if Plan(testPolicy("/h", "/h/repo"), mounts.Session{}).ScopeAbstractUnix {
		t.Error("abstract-socket scope without the session asking for it")
	}
}

// TestBuildTmpSize: the policy's budget reaches the plan, and the dry run says it.
func TestBuildTmpSize(t *testing.T) {
	p := testPolicy("/h", "/h/repo")
	p.TmpSize = 8 << 20
	plan := Plan(p, mounts.Session{})
	if plan.TmpSize != 8<<20 || !strings.Contains(plan.String(), "\nbudget   8M  # --tmp-size") {
		t.Errorf("plan's budget %d:\n%s", plan.TmpSize, plan)
	}
	p.TmpSize = 0
	if plan := Plan(p, mounts.Session{}); strings.Contains(plan.String(), "budget") {
		t.Errorf("a plan without a budget prints one:\n%s", plan)
	}
}

// TestBuildDenyPathSockets: with the session's DenyPathSockets the plan grants path
// sockets beneath the handed-in sockets only — not the writable directories (a
// socket made outside the sandbox there is a host daemon's), not HOME's kept paths —
// and the dry run shows them.
func TestBuildDenyPathSockets(t *testing.T) {
	p := testPolicy("/h", "/h/repo")
	p.AddDirs = []string{"/srv/extra"}
	p.Keep = []policy.Kept{{Path: "/h/.agent", Dir: true}}
	p.Sockets = []policy.Socket{{Path: "/tmp/ssh-x/agent.1", Bind: "/tmp/ssh-x"}, {Path: "/var/lib/db.sock", Bind: "/var/lib/db.sock"}}
	gitRW := []mounts.Op{{Kind: mounts.Bind, Source: "/h/main/.git/worktrees/w", Dest: "/h/main/.git/worktrees/w"}}
	plan := Plan(p, mounts.Session{DenyPathSockets: true, GitRW: gitRW})
	want := []string{"/tmp/ssh-x", "/var/lib/db.sock"}
	if !plan.DenyPathSockets || !slices.Equal(plan.PathSocketGrants, want) {
		t.Fatalf("grants %v (deny %v), want %v", plan.PathSocketGrants, plan.DenyPathSockets, want)
	}
	if !strings.Contains(plan.String(), "landlock deny resolve-unix") {
		t.Errorf("dry run does not show the rule:\n%s", plan)
	}
	p.ReadOnly = true
	if got := Plan(p, mounts.Session{DenyPathSockets: true}).PathSocketGrants; slices.Contains(got, "/h/repo") {
		t.Errorf("a --read-only repository granted: %v", got)
	}
	if Plan(testPolicy("/h", "/h/repo"), mounts.Session{}).DenyPathSockets {
		t.Error("deny-by-default without the session asking for it")
	}
}

// TestPlanPathSocketsLine: the dry run names the mechanism that keeps the command
// off the host's path sockets, and what it costs: Landlock's rule (no mounts inside)
// or the masks of those found at launch (--nested-sandbox, or before Linux 7.1).
func TestPlanPathSocketsLine(t *testing.T) {
	deny := Plan(testPolicy("/h", "/h/repo"), mounts.Session{DenyPathSockets: true}).String()
	masks := Plan(testPolicy("/h", "/h/repo"), mounts.Session{MaskSockets: []string{"/var/lib/db.sock"}}).String()
	for _, c := range []struct{ plan, want, not string }{
		{deny, "landlock deny resolve-unix", "masked at launch"},
		{deny, "cannot mount (nested sandboxes need --nested-sandbox)", ""},
		{masks, "sockets  masked at launch", "landlock deny"},
		{masks, "those bound later stay reachable", ""},
		{masks, "ro-bind  " + mounts.MaskSource + " -> /var/lib/db.sock", ""},
	} {
		if !strings.Contains(c.plan, c.want) || c.not != "" && strings.Contains(c.plan, c.not) {
			t.Errorf("want %q, not %q:\n%s", c.want, c.not, c.plan)
		}
	}
}

// TestBuildDevices: the handed-in devices are bound right after the private /dev
// they go into, each with the identity the launcher saw (SourceIDs).
func TestBuildDevices(t *testing.T) {
	p := testPolicy("/h", "/h/repo")
	p.Devices = []policy.Device{{Path: "/dev/dri/renderD128", From: "--gpu"}, {Path: "/dev/fuse", From: "--device"}}
	id := mounts.FileID{Dev: 5, Ino: 42}
	plan := Plan(p, mounts.Session{SourceIDs: map[string]mounts.FileID{"/dev/dri/renderD128": id}})
	i := slices.IndexFunc(plan.Ops, func(o mounts.Op) bool { return o.Kind == mounts.Dev })
	if i < 0 || len(plan.Ops) < i+3 {
		t.Fatalf("no /dev followed by two devices:\n%s", plan)
	}
	a, b := plan.Ops[i+1], plan.Ops[i+2]
	if a.Kind != mounts.Device || a.Source != "/dev/dri/renderD128" || a.Dest != a.Source || a.SourceID != id || !strings.Contains(a.Why, "--gpu") {
		t.Errorf("first device op: %+v", a)
	}
	if b.Kind != mounts.Device || b.Source != "/dev/fuse" || b.SourceID != (mounts.FileID{}) {
		t.Errorf("second device op: %+v", b)
	}
}

// TestBuildConfineSockets: every network mode that makes a new network namespace
// (--offline, --allow-net) confines the command's socket families, and --dry-run
// says so; the host's network (the default) leaves them alone.
func TestBuildConfineSockets(t *testing.T) {
	for _, c := range []struct {
		name     string
		offline  bool
		allowNet []string
		want     bool
	}{{"host network", false, nil, false}, {"--offline", true, nil, true}, {"--allow-net", false, []string{"example.com"}, true}} {
		p := testPolicy("", "/srv/repo")
		p.Offline, p.AllowNet = c.offline, c.allowNet
		plan := Plan(p, mounts.Session{})
		if plan.ConfineSockets != c.want || plan.Namespaces.Net != c.want {
			t.Errorf("%s: ConfineSockets %t, net %t; want %t", c.name, plan.ConfineSockets, plan.Namespaces.Net, c.want)
		}
		if shown := strings.Contains(plan.String(), "seccomp  sockets unix inet inet6 netlink packet"); shown != c.want {
			t.Errorf("%s: dry run shows the socket rule: %t, want %t:\n%s", c.name, shown, c.want, plan)
		}
	}
}
