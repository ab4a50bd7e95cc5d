package adversarial

import (
	"os"
	"os/exec"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
)

// The command's standard streams are the launcher's descriptors, opened in the
// host's mount namespace. Their /proc/self/fd links reopen what they name there,
// with the access the file's mode grants rather than the one it was opened with: a
// host file given on standard input would be writable inside, a directory a way to
// create files in it. Each row runs through TestEscapes on both backends, and
// TestStdioDoors runs them through the Go init and the Go API.
func init() { attacks = append(attacks, stdioAttacks...) }

var stdioAttacks = []attack{
	{name: "host file on standard input reopened for writing", script: `
		try stdin-reopened-for-writing sh -c 'echo pwned > /proc/self/fd/0 && grep -q pwned "$VICTIM"'
		try stdin-reopened-read-write sh -c 'echo pwned 1<>/proc/self/fd/0 && grep -q pwned "$VICTIM"'
		echo DONE`,
		run: stdinFrom(func(x *target) string { return x.Victim })},
	{name: "host directory on standard input", script: `
		try stdin-directory-create sh -c 'echo pwned > /proc/self/fd/0/planted'
		try stdin-directory-fd-create sh -c 'cd /proc/self/fd/0 && echo pwned > planted'
		echo DONE`,
		run:     stdinFrom(func(x *target) string { return x.Outside }),
		refused: "standard input is a directory"},
}

// stdinFrom launches the script with the host path that path names, opened
// read-only by the operator's shell (agentbox exec … < PATH), as its standard input.
func stdinFrom(path func(x *target) string) func(t *testing.T, x *target, cmd *exec.Cmd) sandboxtest.Result {
	return func(t *testing.T, x *target, cmd *exec.Cmd) sandboxtest.Result {
		f, err := os.Open(path(x))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		cmd.Stdin = f
		return sandboxtest.Run(cmd)
	}
}

// TestStdioDoors runs the standard-stream rows through the other ways in: the Go
// init and the Go API, which hand their caller's streams to the same session core.
func TestStdioDoors(t *testing.T) {
	runAttacksOn(t, []string{sandboxtest.NativeGo, sandboxtest.GoAPI}, stdioAttacks)
}
