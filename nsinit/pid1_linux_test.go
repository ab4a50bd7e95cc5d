package nsinit

import (
	"os"
	"slices"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/mounts"
)

// pid1Signals sends PID 1 every signal from inside, SIGKILL and SIGSTOP included,
// prints what PID 1 catches, and exits 7 if PID 1 is still there.
const pid1Signals = `grep SigCgt /proc/1/status
s=1
while [ $s -le 64 ]; do
	kill -$s 1 2>/dev/null
	s=$((s+1))
done
sleep 0.2
grep -q '^State:.*[RS]' /proc/1/status && exit 7`

// The Go init (the Go API's, and the bwrap backend's) catches no signal once the
// command may run: every signal sent to it from inside is dropped by the kernel, none
// ends it or makes its runtime print a traceback, and the session ends with the
// command's status. (Its runtime had a handler for each: SIGSEGV printed a traceback,
// SIGTERM ended it.)
func TestGoInitCatchesNoSignal(t *testing.T) {
	if !testenv.AsTestUser(t) {
		return
	}
	dir := t.TempDir()
	out, err := os.Create(dir + "/out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	plan := mounts.Plan{
		Ops: []mounts.Op{
			{Kind: mounts.BindRO, Source: "/", Dest: "/"},
			{Kind: mounts.Proc, Dest: "/proc"},
			{Kind: mounts.Dev, Dest: "/dev"},
		},
		Workdir: "/",
		Command: []string{"/bin/sh", "-c", pid1Signals},
	}
	res, err := Run(plan, Options{Stdio: Stdio{Stdin: null, Stdout: out, Stderr: out}})
	b, _ := os.ReadFile(out.Name())
	if err != nil || res.Status != 7 {
		t.Fatalf("Go init after every signal from inside: %v, status %d, want 7:\n%s", err, res.Status, b)
	}
	if got := string(b); got != "SigCgt:\t0000000000000000\n" {
		t.Errorf("the command's and the init's output: %q, want only PID 1's empty SigCgt", got)
	}
	if !slices.ContainsFunc(res.Phases, func(p Phase) bool { return p.Name == "init-start" }) {
		t.Errorf("phases %v: not the Go init", res.Phases)
	}
}
