package leafcg

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestRemoveLeftovers: a launch removes the session cgroups a killed launcher left in
// the cgroup it makes its own in — empty, the launcher gone — with what is below
// them, and leaves a live launcher's, one that still holds a process, and any other
// cgroup alone.
func TestRemoveLeftovers(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skip(t, "needs root: creates cgroups")
	}
	h, err := Probe()
	if err != nil || h.Own == "" {
		testenv.Skip(t, "no cgroup2 hierarchy holds this process: %v", err)
	}
	old := leftoverAge
	leftoverAge = 0
	defer func() { leftoverAge = old }()
	parent := filepath.Join(h.Own, fmt.Sprintf("agentbox-leafcg-leftovers-%d", os.Getpid()))
	if err := os.Mkdir(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = (&Leaf{Top: parent}).Remove() }()
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	dead := gone.Process.Pid
	mk := func(rel string) string {
		d := filepath.Join(parent, rel)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	left := mk(fmt.Sprintf("agentbox-%d-1", dead))
	mk(fmt.Sprintf("agentbox-%d-1/sandbox", dead))
	live := mk(fmt.Sprintf("agentbox-%d-2", os.Getpid()))
	busy := mk(fmt.Sprintf("agentbox-%d-3", dead))
	other := mk(fmt.Sprintf("agentbox-test-%d-4", dead))
	sleeper := exec.Command("sleep", "30")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() }()
	if err := os.WriteFile(filepath.Join(busy, "cgroup.procs"), []byte(strconv.Itoa(sleeper.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}

	removeLeftovers(parent)
	if _, err := os.Stat(left); !os.IsNotExist(err) {
		t.Errorf("a dead launcher's empty session cgroup is still there: %v", err)
	}
	for _, d := range []string{live, busy, other} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s was removed: %v", d, err)
		}
	}
	_ = unix.Kill(sleeper.Process.Pid, unix.SIGKILL)
}

// TestVerify: a limit counts once its control file reads it back (memory.max rounded
// down to whole pages), with its controllers enabled in the session's cgroup and for
// its children; anything else refuses the launch.
func TestVerify(t *testing.T) {
	lim := Limits{Memory: 100000000, Pids: 64}
	files := [][2]string{{"memory.max", "100000000"}, {"memory.swap.max", "0"}, {"pids.max", "64"}}
	good := map[string]string{
		"cgroup.controllers": "cpu memory pids\n", "cgroup.subtree_control": "memory pids\n",
		"memory.max": "99999744\n", "memory.swap.max": "0\n", "pids.max": "64\n",
	}
	for _, c := range []struct {
		name, file, text string
		ok               bool
	}{
		{"in force", "", "", true},
		{"no swap accounting", "memory.swap.max", "", true},
		{"memory.max unlimited", "memory.max", "max\n", false},
		{"memory.max above", "memory.max", "200000000\n", false},
		{"pids.max other", "pids.max", "max\n", false},
		{"controller gone", "cgroup.controllers", "cpu pids\n", false},
		{"not enabled below", "cgroup.subtree_control", "pids\n", false},
	} {
		dir := t.TempDir()
		for name, text := range good {
			if name == c.file {
				if c.text == "" {
					continue
				}
				text = c.text
			}
			if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		l := &Leaf{Top: dir, Limits: lim}
		err = l.verify(fd, files, lim.controllers())
		unix.Close(fd)
		if (err == nil) != c.ok {
			t.Errorf("%s: %v, want ok %v", c.name, err, c.ok)
		}
	}
}
