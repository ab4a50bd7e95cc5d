//go:build race

package nsinit

import (
	"os"
	"slices"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/mounts"
)

// A -race build launches with the Go init, asked for the raw one or not: the raw
// init is not built in (rawlaunch_other_linux.go), there is no raw spare, and the
// launch works end to end — the race detector's instrumentation once made the raw
// init's child fault before it did anything ("init: exited before starting the
// command (signal: segmentation fault)").
func TestRaceBuildRunsGoInit(t *testing.T) {
	if !testenv.AsTestUser(t) {
		return
	}
	if RawInitAvailable() {
		t.Fatal("RawInitAvailable in a -race build")
	}
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	stdio := Stdio{Stdin: null, Stdout: null, Stderr: null}
	if spare := PrestartRaw(false, stdio); spare != nil {
		spare.Discard()
		t.Fatal("PrestartRaw gave a raw spare in a -race build")
	}
	plan := mounts.Plan{
		Ops: []mounts.Op{
			{Kind: mounts.BindRO, Source: "/", Dest: "/"},
			{Kind: mounts.Proc, Dest: "/proc"},
			{Kind: mounts.Dev, Dest: "/dev"},
		},
		Workdir: "/",
		Command: []string{"/bin/sh", "-c", "exit 3"},
	}
	res, err := Run(plan, Options{Stdio: stdio, RawInit: true})
	if err != nil || res.Status != 3 || !slices.ContainsFunc(res.Phases, func(p Phase) bool { return p.Name == "init-start" }) {
		t.Fatalf("-race launch asking for the raw init: %v, status %d, phases %v; want 3 from the Go init", err, res.Status, res.Phases)
	}
}
