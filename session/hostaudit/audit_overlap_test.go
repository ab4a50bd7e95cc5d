package hostaudit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

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

// TestMappableStdio: a standard stream that is a file of the repository's
// filesystem opened for reading and writing keeps the launch from trusting its
// watch; one opened for writing only, or a pipe, does not. The streams are the
// test binary's own, run again with them.
func TestMappableStdio(t *testing.T) {
	if repo := os.Getenv("AGENTBOX_TEST_MAPPABLE"); repo != "" {
		fmt.Fprint(os.Stderr, mappableStdio(repo, backend.Stdio{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}))
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
}
