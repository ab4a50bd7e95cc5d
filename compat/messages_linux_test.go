package compat_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/backend"
	"github.com/agentbox/agentbox/compat"
	"github.com/agentbox/agentbox/internal/termsafe"
	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/nsinit"
)

// initMain runs the init when bwrap started this test binary as one.
func initMain() {
	if nsinit.IsInit() {
		nsinit.Main()
	}
}

// TestBwrapMessagesEscaped: bwrap prints the plan's paths raw in its errors ("Can't
// create file at PATH"), and a session can choose such a path (a nested
// repository's .git, a socket it bound and removes while the next launch starts).
// The real bubblewrap 0.12.0 fails on a destination named with an OSC 52 sequence
// (the clipboard), a CSI and U+202E: what reaches the launcher's stderr must carry
// none of them, while the command's own stderr stays the launcher's.
func TestBwrapMessagesEscaped(t *testing.T) {
	bwrap := sandboxtest.BwrapPath(t)
	if bwrap == "" {
		bwrap = testenv.SetupFile(t, sandboxtest.BuiltBwrap, "bubblewrap 0.12.0")
	}
	t.Setenv("AGENTBOX_BWRAP", bwrap)
	const hostile = "x\x1b]52;c;SGVsbG8=\x07\u009b31m\u202e.sock"
	name, err := strconv.Unquote(`"` + hostile + `"`)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("/var/tmp", "bwrap-msg-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	base := []mounts.Op{
		{Kind: mounts.BindRO, Source: "/", Dest: "/"},
		{Kind: mounts.Tmpfs, Dest: "/tmp", Mode: 0o1777},
		{Kind: mounts.Tmpfs, Dest: "/run", Mode: 0o755}, // the init's mount point
	}
	for _, tt := range []struct {
		name    string
		ops     []mounts.Op
		script  string
		wantErr bool
		want    string // in the launcher's stderr
	}{
		// The destination lies in a read-only bind of a host directory where no such
		// file exists: bwrap cannot create its mount point.
		{"bwrap's message", append(base, mounts.Op{Kind: mounts.BindRO, Source: os.DevNull, Dest: filepath.Join(dir, name)}), "exit 0", true, "Can't create file"},
		// The command's stderr is the launcher's own, bytes unchanged.
		{"the command's stderr", base, `printf 'raw\033[0m' >&2`, false, "raw\x1b[0m"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			stderr, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
			if err != nil {
				t.Fatal(err)
			}
			defer stderr.Close()
			devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer devnull.Close()
			plan := mounts.Plan{Ops: tt.ops, Workdir: "/", Command: []string{"/bin/sh", "-c", tt.script}}
			res, err := compat.Run(plan, backend.Stdio{Stdin: devnull, Stdout: devnull, Stderr: stderr}, nil, nil)
			if (err != nil) != tt.wantErr || (!tt.wantErr && res.Status != 0) {
				got, _ := os.ReadFile(stderr.Name())
				t.Fatalf("Run = %+v, %v; want an error: %v; stderr %q", res, err, tt.wantErr, got)
			}
			got, _ := os.ReadFile(stderr.Name())
			if !strings.Contains(string(got), tt.want) {
				t.Fatalf("stderr %q does not hold %q", got, tt.want)
			}
			if tt.wantErr && !termsafe.Safe(strings.ReplaceAll(string(got), "\n", "")) {
				t.Errorf("bwrap's message reached stderr with bytes a terminal acts on: %q", got)
			}
		})
	}
}
