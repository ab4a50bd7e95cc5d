package nsinit

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/leafcg"
)

// TestInitCgroupNamespace: on every way the init starts — the raw init and the Go
// init cloned afresh, and each kind of spare, cloned ahead — the sandbox has a
// cgroup namespace of its own (P5), which the init now makes as its plan's first
// step; and with Options.Cgroup that namespace is rooted at that cgroup (the fresh
// inits are cloned into it, the spares moved in before their plan), so the command
// and PID 1 read "0::/". The second part needs a cgroup this user can make: root, or
// a user in a delegated cgroup; elsewhere (the kernel matrix's user in the root
// cgroup) the first part is what runs.
func TestInitCgroupNamespace(t *testing.T) {
	hostNS, err := os.Readlink("/proc/self/ns/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	base := ""
	if h, err := leafcg.Probe(); err == nil && h.Own != "" {
		base = h.Own
		if os.Geteuid() == 0 {
			base = h.Mount // root may move a process anywhere
		}
	}
	starts := []struct {
		name  string
		raw   bool
		spare func(Stdio) *Prestarted
	}{
		{"raw", true, nil},
		{"go", false, nil},
		{"raw-spare", true, func(s Stdio) *Prestarted { return PrestartRaw(false, s) }},
		{"go-spare", false, func(Stdio) *Prestarted { p, _ := Prestart(false, "", nil); return p }},
	}
	for i, s := range starts {
		t.Run(s.name, func(t *testing.T) {
			var cg *os.File
			dir := ""
			if base != "" {
				dir = filepath.Join(base, fmt.Sprintf("agentbox-nsinit-test-%d-%d", os.Getpid(), i))
				if os.Mkdir(dir, 0o755) != nil {
					dir = ""
				}
			}
			if dir != "" {
				defer func() {
					// An init may take a moment to be gone after the session's end.
					for n := 0; n < 200 && syscall.Rmdir(dir) == syscall.EBUSY; n++ {
						time.Sleep(10 * time.Millisecond)
					}
				}()
				if cg, err = os.Open(dir); err != nil {
					t.Fatal(err)
				}
				defer cg.Close()
			} else {
				t.Logf("no cgroup can be made here (%q): the namespace alone is checked", base)
			}
			out, err := os.CreateTemp(t.TempDir(), "out")
			if err != nil {
				t.Fatal(err)
			}
			defer out.Close()
			null := devNull(t)
			opts := Options{Stdio: Stdio{Stdin: null, Stdout: out, Stderr: null}, RawInit: s.raw, Cgroup: cg}
			plan := minimalPlan("/bin/sh", "-c", "readlink /proc/self/ns/cgroup; grep -h '^0::' /proc/self/cgroup /proc/1/cgroup")
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
			b, _ := os.ReadFile(out.Name())
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			if err != nil || res.Status != 0 || len(lines) != 3 {
				t.Fatalf("%v, status %d, output %q", err, res.Status, b)
			}
			if lines[0] == hostNS || !strings.HasPrefix(lines[0], "cgroup:[") {
				t.Errorf("the sandbox's cgroup namespace is %q, the launcher's %q: want one of its own", lines[0], hostNS)
			}
			if dir != "" && (lines[1] != "0::/" || lines[2] != "0::/") {
				t.Errorf("in %s the command and PID 1 read %q; want 0::/ for both", dir, lines[1:])
			}
		})
	}
}
