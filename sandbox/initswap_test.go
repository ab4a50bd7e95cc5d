package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentbox/agentbox/backend"
	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/nsinit"
)

// swapFirst is a writer racing the launch: it runs swap after the session's
// checks and before the driver starts the init, then launches through inner.
type swapFirst struct {
	inner backend.Driver
	swap  func()
}

func (d swapFirst) Run(plan mounts.Plan, o backend.Options) (backend.Result, error) {
	d.swap()
	return d.inner.Run(plan, o)
}

// TestInitBinarySwappedAfterCheck: an InitBinary in a directory that another
// session may write (nothing this session could know) is replaced with a script
// between the launch's checks and the init's start, through Run and through a
// Launcher. The init started must be the file checked; the script must not run.
func TestInitBinarySwappedAfterCheck(t *testing.T) {
	if !asTestUser(t) {
		return
	}
	for _, door := range []string{"run", "launcher"} {
		t.Run(door, func(t *testing.T) {
			dir := t.TempDir()
			init := filepath.Join(dir, "agentbox")
			// This test binary: it calls Init, so it serves as the init and as a
			// Launcher's helper, as an installed program using this package would.
			copyExecutable(t, "/proc/self/exe", init)
			marker := filepath.Join(t.TempDir(), "swapped init ran")
			swap := func() {
				tmp := init + ".new"
				script := fmt.Sprintf("#!/bin/sh\ntouch '%s'\n", marker)
				if err := os.WriteFile(tmp, []byte(script), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(tmp, init); err != nil {
					t.Fatal(err)
				}
			}
			var inner backend.Driver = nsinitDriver{}
			if door == "launcher" {
				l, err := NewLauncher(init)
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
				inner = launcherDriver{l}
			}
			repo := newRepo(t)
			res, err := run(Options{Command: []string{"/bin/sh", "-c", "exit 3"}, Repo: repo, Dir: repo, InitBinary: init, NoGitSave: true, NoRecord: true},
				swapFirst{inner: inner, swap: swap})
			if _, serr := os.Stat(marker); serr == nil {
				t.Fatalf("the script swapped in for InitBinary after the checks ran as the init (status %d, %v)", res.Status, err)
			}
			if err != nil || res.Status != 3 {
				t.Fatalf("launch with the checked InitBinary: status %d, %v; want 3, nil", res.Status, err)
			}
		})
	}
}

// nsinitDriver launches a fresh Go init (no spare), as Run does without Prestart.
type nsinitDriver struct{}

func (nsinitDriver) Run(plan mounts.Plan, o backend.Options) (backend.Result, error) {
	return nsinit.Run(plan, o)
}

func copyExecutable(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
}
