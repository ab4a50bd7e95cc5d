package leafcg

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLimitParent: the session's limited cgroup goes below the nearest cgroup from
// the launcher's up that gives its children every controller asked for; cgroup v1,
// a controller the v2 hierarchy lacks, and no delegation each refuse with the flag,
// the reason and the fix.
func TestLimitParent(t *testing.T) {
	root := t.TempDir()
	write := func(rel, text string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("cgroup.controllers", "cpu memory pids\n")
	write("cgroup.subtree_control", "memory pids cpu\n")
	write("cgroup.procs", "")
	write("user/cgroup.subtree_control", "memory pids\n")
	write("user/cgroup.procs", "")
	write("user/session/cgroup.subtree_control", "")
	write("user/session/cgroup.procs", "")
	own := filepath.Join(root, "user/session")
	for _, c := range []struct {
		own, mount string
		want       []string
		parent     string
		err        string
	}{
		{own, root, []string{"memory"}, filepath.Join(root, "user"), ""},
		{own, root, []string{"memory", "pids"}, filepath.Join(root, "user"), ""},
		{own, root, []string{"cpu"}, root, ""},
		{"", root, []string{"pids"}, "", "--pids: refused: this host cannot enforce it: the host uses cgroup v1"},
		{own, filepath.Join(root, "user"), []string{"cpu"}, "", "--cpus: refused: this host cannot enforce it: the cgroup v2 hierarchy has no cpu controller"},
		{own, own, []string{"memory"}, "", "--memory: refused: this host cannot enforce it: no cgroup you can write, from yours (" + own + ") up, has the memory controller enabled for its children"},
	} {
		if c.mount == filepath.Join(root, "user") {
			write("user/cgroup.controllers", "memory pids\n")
		}
		if c.mount == own {
			write("user/session/cgroup.controllers", "memory pids\n")
		}
		got, err := limitParent(c.own, c.mount, c.want)
		switch {
		case c.err == "" && (err != nil || got != c.parent):
			t.Errorf("%v from %s: %q, %v; want %q", c.want, c.own, got, err, c.parent)
		case c.err != "" && (err == nil || !strings.HasPrefix(err.Error(), c.err) || !strings.Contains(err.Error(), "leave the flag out")):
			t.Errorf("%v from %s: %q, %v; want the refusal %q", c.want, c.own, got, err, c.err)
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
