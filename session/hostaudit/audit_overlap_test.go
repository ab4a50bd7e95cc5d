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
// and writing, on a filesystem whose directories the launch watched, keeps the
// launch from trusting its watch: the tree's own filesystem, and a tmpfs mounted in
// the tree. One opened for writing only or reading only, or a file of a filesystem
// the watch has no directory of, does not. The streams are the test binary's own,
// run again with them (in a user and mount namespace of its own, for the mounts).
func TestMappableStdio(t *testing.T) {
	if repo := os.Getenv("AGENTBOX_TEST_MAPPABLE"); repo != "" {
		// repo/sub is the mount point of a tmpfs in the tree; "outside" of one beside it.
		for _, d := range []string{filepath.Join(repo, "sub"), filepath.Join(filepath.Dir(repo), "outside")} {
			if err := unix.Mount("tmpfs", d, "tmpfs", 0, ""); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(d, "in"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		base, err := audit.Scan(repo, audit.ScanOptions{Walk: true, Watch: true, Home: filepath.Dir(repo)})
		if err != nil {
			t.Fatal(err)
		}
		if base.Launch == nil {
			t.Fatal("no watch of the tree")
		}
		defer base.Launch.Close()
		stdio := backend.Stdio{Stdin: os.Stdin, Stdout: os.Stdout}
		if in := os.Getenv("AGENTBOX_TEST_MAPPABLE_IN"); in != "" {
			// A file of a mount made here: opened after it, as the shell would.
			if stdio.Stdin, err = os.OpenFile(filepath.Join(filepath.Dir(repo), in), os.O_RDWR, 0); err != nil {
				t.Fatal(err)
			}
		}
		fmt.Fprint(os.Stderr, mappableStdio(stdio, base.Launch.OnDevice))
		return
	}
	top := testenv.CanonTempDir(t)
	repo := filepath.Join(top, "repo")
	for _, d := range []string{repo, filepath.Join(repo, "sub"), filepath.Join(top, "outside")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		what string
		flag int
		in   string // a file of a mount the child makes, as its standard input
		want string
	}{
		{"the tree's own, read and write", os.O_RDWR, "", "true"},
		{"the tree's own, write only", os.O_WRONLY, "", "false"},
		{"the tree's own, read only", os.O_RDONLY, "", "false"},
		{"a tmpfs mounted in the tree, read and write", 0, "repo/sub/in", "true"},
		{"a tmpfs outside the tree, read and write", 0, "outside/in", "false"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestMappableStdio$")
		cmd.Env = append(os.Environ(), "AGENTBOX_TEST_MAPPABLE="+repo, "AGENTBOX_TEST_MAPPABLE_IN="+c.in)
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER | unix.CLONE_NEWNS,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}}
		if c.in == "" {
			f, err := os.OpenFile(filepath.Join(repo, "out"), c.flag|os.O_CREATE, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if c.flag == os.O_RDONLY {
				cmd.Stdin = f
			} else {
				cmd.Stdout = f
			}
		}
		var errb strings.Builder
		cmd.Stderr = &errb
		if err := cmd.Run(); err != nil || errb.String() != c.want {
			t.Errorf("%s: %q, %v; want %s", c.what, errb.String(), err, c.want)
		}
	}
}
