package leafcg

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestLimitParent: the session's limited cgroup goes below the nearest cgroup from
// the launcher's up that is delegated to the caller and gives its children every
// controller asked for, or can; for a user, delegated means owned (the directory and
// its cgroup.procs), and the climb stops at the first cgroup that is not; for root,
// its own cgroup or up to the one systemd marked as delegated, never a slice above;
// never the root cgroup. cgroup v1, a controller the v2 hierarchy lacks, and no
// delegation each refuse with the flag, the reason and the fix.
func TestLimitParent(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skip(t, "needs root: makes files of another user and trusted.* attributes")
	}
	const user = 4242
	root := t.TempDir()
	// cg makes the cgroup rel owned by uid, with its control files.
	cg := func(rel string, uid int, controllers, subtree, procs string) string {
		d := filepath.Join(root, rel)
		if err := os.MkdirAll(d, 0o777); err != nil {
			t.Fatal(err)
		}
		for name, text := range map[string]string{"cgroup.controllers": controllers, "cgroup.subtree_control": subtree, "cgroup.procs": procs} {
			p := filepath.Join(d, name)
			if err := os.WriteFile(p, []byte(text), 0o666); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(p, uid, uid); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chown(d, uid, uid); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
		return d
	}
	mark := func(d string) {
		if err := unix.Lsetxattr(d, "trusted.delegate", []byte("1"), 0); err != nil {
			testenv.Skip(t, "trusted.* attributes on %s: %v", d, err)
		}
	}
	cg("", 0, "cpu memory pids", "cpu memory pids", "1")
	cg("user.slice", 0, "cpu memory pids", "cpu memory pids", "")
	userSvc := cg("user.slice/user@4242", user, "cpu memory pids", "cpu memory pids", "")
	mark(userSvc)
	app := cg("user.slice/user@4242/app", user, "memory pids", "", "")
	scope := cg("user.slice/user@4242/app/scope", user, "", "", "77")
	// A cgroup of root's, writable to everyone, with a cgroup of the user's below it.
	cg("shared", 0, "cpu memory pids", "cpu memory pids", "")
	mine := cg("shared/mine", user, "cpu memory pids", "", "78")
	cg("system.slice", 0, "cpu memory pids", "cpu memory pids", "")
	svc := cg("system.slice/svc", 0, "cpu memory pids", "", "79")
	deleg := cg("system.slice/deleg", 0, "memory pids", "memory pids", "")
	mark(deleg)
	delegSub := cg("system.slice/deleg/sub", 0, "memory pids", "", "80")

	h := func(own string) Host { return Host{Own: own, Mount: root} }
	for _, c := range []struct {
		name   string
		host   Host
		uid    int
		want   []string
		parent string
		enable []string
		err    string
	}{
		{"user, enabled here by the launcher", h(scope), user, []string{"memory"}, app, []string{"memory"}, ""},
		{"user, enabled above", h(scope), user, []string{"cpu"}, userSvc, nil, ""},
		{"user, below a cgroup writable to all", h(mine), user, []string{"memory"}, "", nil, "--memory: refused: this host cannot enforce it: no cgroup delegated to you (yours, with its cgroup.procs), from yours (" + mine + ") up, gives its children the memory controller"},
		{"user, cgroup not its own", h(svc), user, []string{"pids"}, "", nil, "--pids: refused: this host cannot enforce it: your cgroup (" + svc + ") is not delegated to you"},
		{"root, never a slice above its own", h(svc), 0, []string{"memory"}, "", nil, "--memory: refused: this host cannot enforce it: as root, the session's cgroup goes only below your own cgroup (" + svc + ")"},
		{"root, up to the delegated cgroup", h(delegSub), 0, []string{"memory", "pids"}, deleg, nil, ""},
		{"root, not above the delegated cgroup", h(delegSub), 0, []string{"cpu"}, "", nil, "--cpus: refused: this host cannot enforce it: as root, the session's cgroup goes only between your own cgroup (" + delegSub + ") and the one systemd delegated (" + deleg + ")"},
		{"root cgroup", h(root), 0, []string{"pids"}, "", nil, "--pids: refused: this host cannot enforce it: you run in the root cgroup"},
		{"cgroup v1", Host{Mount: root}, user, []string{"pids"}, "", nil, "--pids: refused: this host cannot enforce it: the host uses cgroup v1"},
		{"no such controller", Host{Own: scope, Mount: app}, user, []string{"cpu"}, "", nil, "--cpus: refused: this host cannot enforce it: the cgroup v2 hierarchy has no cpu controller"},
	} {
		got, err := limitParent(c.host, c.uid, c.want)
		switch {
		case c.err == "" && (err != nil || got.dir != c.parent || !slices.Equal(got.enable, c.enable)):
			t.Errorf("%s: %v from %s: %+v, %v; want %q enabling %v", c.name, c.want, c.host.Own, got, err, c.parent, c.enable)
		case c.err != "" && (err == nil || !strings.HasPrefix(err.Error(), c.err) || !strings.Contains(err.Error(), "leave the flag out")):
			t.Errorf("%s: %v from %s: %+v, %v; want the refusal %q", c.name, c.want, c.host.Own, got, err, c.err)
		}
	}
}

// TestKeyed reads the flat-keyed control files the session's usage comes from.
func TestKeyed(t *testing.T) {
	ev := "low 0\nhigh 0\nmax 12\noom 1\noom_kill 3\noom_group_kill 1\n"
	if keyed(ev, "oom_kill") != 3 || keyed(ev, "max") != 12 || keyed(ev, "missing") != -1 {
		t.Errorf("keyed(%q) wrong", ev)
	}
}
