package nsinit

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestInitCgroupNamespace: with Options.Cgroup, the sandbox's cgroup namespace is
// rooted at that cgroup on every way the init starts — the raw init and the Go init
// cloned into it, and each kind of spare, cloned before and moved in before its
// plan — so the command reads "0::/" and the cgroup holds the session.
func TestInitCgroupNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skip(t, "needs root: creates a cgroup and moves the init into it")
	}
	mnts, err := mountinfo.GetMounts(mountinfo.FSTypeFilter("cgroup2"))
	if err != nil {
		t.Fatal(err)
	}
	root := ""
	for _, m := range mnts {
		if m.Root == "/" {
			root = m.Mountpoint
		}
	}
	if root == "" {
		testenv.Skip(t, "no cgroup2 hierarchy mounted")
	}
	starts := []struct {
		name  string
		raw   bool
		spare func(Stdio) *Prestarted
	}{
		{"raw", true, nil},
		{"go", false, nil},
		{"raw-spare", true, func(s Stdio) *Prestarted { return PrestartRaw(false, s) }},
		{"go-spare", false, func(Stdio) *Prestarted { p, _ := Prestart(false, ""); return p }},
	}
	for i, s := range starts {
		t.Run(s.name, func(t *testing.T) {
			dir := filepath.Join(root, fmt.Sprintf("agentbox-nsinit-test-%d-%d", os.Getpid(), i))
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			defer func() {
				// An init may take a moment to be gone after the session's end.
				for n := 0; n < 200 && syscall.Rmdir(dir) == syscall.EBUSY; n++ {
					time.Sleep(10 * time.Millisecond)
				}
			}()
			cg, err := os.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer cg.Close()
			out, err := os.CreateTemp(t.TempDir(), "out")
			if err != nil {
				t.Fatal(err)
			}
			defer out.Close()
			null := devNull(t)
			opts := Options{Stdio: Stdio{Stdin: null, Stdout: out, Stderr: null}, RawInit: s.raw, Cgroup: cg}
			plan := minimalPlan("/bin/sh", "-c", "grep '^0::' /proc/self/cgroup; cat /proc/1/cgroup | grep '^0::'")
			var res Result
			if s.spare != nil {
				p := s.spare(opts.Stdio)
				if p == nil {
					if s.raw && !rawUsable() {
						return // no raw init on this kernel: the fresh case covers the Go init
					}
					t.Fatal("no spare")
				}
				res, err = Native{Spare: p}.Run(plan, opts)
				if err == nil && !res.Prestarted {
					t.Fatal("the spare was not used")
				}
			} else {
				res, err = Run(plan, opts)
			}
			got, _ := os.ReadFile(out.Name())
			if err != nil || res.Status != 0 || string(got) != "0::/\n0::/\n" {
				t.Errorf("in %s: %v, status %d, the command and PID 1 read %q; want 0::/ for both", dir, err, res.Status, got)
			}
		})
	}
}
