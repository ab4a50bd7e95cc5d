package hostaudit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/backend"
	"github.com/agentbox/agentbox/gitguard/audit"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestOverlapsOtherSession: a pending session of a directory inside the
// repository, or of one holding it, keeps this launch from trusting its watch
// (audit_shared.go); one of an unrelated repository, or of the same one, does not.
func TestOverlapsOtherSession(t *testing.T) {
	state := testenv.CanonTempDir(t)
	repo := "/home/u/src/proj"
	if overlapsOtherSession(readPending(state, repo), repo) {
		t.Fatal("no pending session, and an overlap")
	}
	pending := func(other string) func() {
		a := &Auditor{repo: other, id: "x", base: &audit.Surface{Repo: other, Items: map[string]*audit.Item{}}}
		f, name, err := writeJournal(state, a)
		if err != nil {
			t.Fatal(err)
		}
		return func() { a.journal, a.journalPath = f, name; a.Drop() }
	}
	for _, c := range []struct {
		other string
		want  bool
	}{
		{repo, false}, // the same repository: its baseline is inherited instead
		{"/home/u/src/other", false},
		{"/home/u/src/proj2", false},
		{filepath.Join(repo, "sub"), true},
		{"/home/u/src", true},
	} {
		done := pending(c.other)
		if got := overlapsOtherSession(readPending(state, repo), repo); got != c.want {
			t.Errorf("pending session of %s: overlap %v, want %v", c.other, got, c.want)
		}
		done()
	}
}

// TestMappableStdio: a standard stream that is a regular file opened for reading
// and writing keeps the launch from trusting its watch, also where the file lies on
// another filesystem mounted in the tree; one opened for writing only, or a pipe,
// does not. The streams are the test binary's own, run again with them.
func TestMappableStdio(t *testing.T) {
	if repo := os.Getenv("AGENTBOX_TEST_MAPPABLE"); repo != "" {
		fmt.Fprint(os.Stderr, mappableStdio(backend.Stdio{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}))
		return
	}
	if repo := os.Getenv("AGENTBOX_TEST_MAPPABLE_MOUNTED"); repo != "" {
		// In a user and mount namespace of its own: a tmpfs mounted in the tree,
		// and a file of it opened for reading and writing as standard input.
		sub := filepath.Join(repo, "sub")
		if err := unix.Mount("tmpfs", sub, "tmpfs", 0, ""); err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(filepath.Join(sub, "in"), os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprint(os.Stderr, mappableStdio(backend.Stdio{Stdin: f}))
		return
	}
	repo := testenv.CanonTempDir(t)
	for _, c := range []struct {
		flag int
		want string
	}{{os.O_RDWR, "true"}, {os.O_WRONLY, "false"}, {os.O_RDONLY, "false"}} {
		f, err := os.OpenFile(filepath.Join(repo, "out"), c.flag|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestMappableStdio$")
		cmd.Env = append(os.Environ(), "AGENTBOX_TEST_MAPPABLE="+repo)
		if c.flag == os.O_RDONLY {
			cmd.Stdin = f
		} else {
			cmd.Stdout = f
		}
		var errb strings.Builder
		cmd.Stderr = &errb
		err = cmd.Run()
		f.Close()
		if err != nil || errb.String() != c.want {
			t.Errorf("standard stream opened with flags %#x: %q, %v; want %s", c.flag, errb.String(), err, c.want)
		}
	}
	// A file of another filesystem mounted in the tree is the tree's as much: its
	// directories are marked, and a write through its mapping sends no event.
	if err := os.Mkdir(filepath.Join(repo, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestMappableStdio$")
	cmd.Env = append(os.Environ(), "AGENTBOX_TEST_MAPPABLE_MOUNTED="+repo)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER | unix.CLONE_NEWNS,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}}
	var errb strings.Builder
	cmd.Stderr = &errb
	if err := cmd.Run(); err != nil || errb.String() != "true" {
		t.Errorf("standard input a file opened for reading and writing on a tmpfs mounted in the tree: %q, %v; want true", errb.String(), err)
	}
}
