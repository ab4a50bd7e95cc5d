package nsinit

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/mounts"
)

// TestInitHoldsNoInheritedDescriptorEveryRunner: a host directory the launcher holds
// without close-on-exec (as a shell's redirection or a Go API caller's file leaves
// it) reaches no process of the sandbox, on every runner: the Go init's start marks
// it close-on-exec by close_range, or by its walk of /proc/self/fd (before Linux
// 5.11, and with the fallbacks compiled in), and the Go init refuses a start that
// let one through, so the launch fails where the start did not. The command's
// processes are checked from the host while they wait; the init's /proc files
// belong to root (it is not dumpable), and test/adversarial's
// TestInitHoldsNoInheritedDescriptor, as root, checks the init from the host too.
// Here the kernel matrix runs each kernel's way.
func TestInitHoldsNoInheritedDescriptorEveryRunner(t *testing.T) {
	if !testenv.AsTestUser(t) {
		return
	}
	held := testenv.Dir(t, "held")
	fd, err := unix.Open(held, unix.O_RDONLY|unix.O_DIRECTORY, 0) // inheritable on purpose
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	null := devNull(t)
	for _, r := range runners() {
		t.Run(r.name, func(t *testing.T) {
			r.setEnv(t)
			if r.raw {
				waitRawFree(t)
			}
			shared := t.TempDir() // /tmp/shared inside
			plan := minimalPlan("/bin/sh", "-c", `touch /tmp/shared/ready; i=0
				while [ ! -e /tmp/shared/go ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done`)
			plan.Ops = append(plan.Ops, mounts.Op{Kind: mounts.Bind, Source: shared, Dest: "/tmp/shared"})
			plan.Ops = append(plan.Ops, r.extra...)
			type ended struct {
				res Result
				err error
			}
			done := make(chan ended, 1)
			go func() {
				res, err := Run(plan, Options{Stdio: Stdio{Stdin: null, Stdout: null, Stderr: os.Stderr}, RawInit: r.raw})
				done <- ended{res, err}
			}()
			deadline := time.Now().Add(time.Minute)
			for {
				if _, err := os.Stat(filepath.Join(shared, "ready")); err == nil {
					break
				}
				select {
				case e := <-done:
					t.Fatalf("the session ended before its command was ready: %v, status %d", e.err, e.res.Status)
				default:
				}
				if time.Now().After(deadline) {
					t.Fatal("the command did not start within a minute")
				}
				time.Sleep(10 * time.Millisecond)
			}
			holders, read := sandboxHolders(held)
			if err := os.WriteFile(filepath.Join(shared, "go"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			e := <-done
			if e.err != nil || e.res.Status != 0 {
				t.Errorf("the session: %v, status %d", e.err, e.res.Status)
			}
			if len(e.res.Phases) > 0 && r.phase != "" && !strings.Contains(fmt.Sprint(phaseNames(e.res)), r.phase) {
				t.Errorf("phases %v, want %q", phaseNames(e.res), r.phase)
			}
			if read == 0 {
				t.Error("no process of the sandbox had its descriptors read")
			}
			if len(holders) > 0 {
				t.Errorf("processes of the sandbox hold the launcher's inherited %s: %v", held, holders)
			}
		})
	}
}

// sandboxHolders lists this process's descendants in another PID namespace (the
// sandbox's) that hold a descriptor of path; read counts those whose descriptors
// it could list.
func sandboxHolders(path string) (out []string, read int) {
	self, _ := os.Readlink("/proc/self/ns/pid")
	var walk func(pid int)
	walk = func(pid int) {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
		for _, task := range tasks {
			b, _ := os.ReadFile(task)
			for _, f := range strings.Fields(string(b)) {
				child, err := strconv.Atoi(f)
				if err != nil {
					continue
				}
				if ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", child)); ns != "" && ns != self {
					ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", child))
					if err == nil {
						read++
					}

					for _, ent := range ents {
						if target, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", child, ent.Name())); target == path {
							out = append(out, fmt.Sprintf("pid %d fd %s", child, ent.Name()))
						}
					}
				}
				walk(child)
			}
		}
	}
	walk(os.Getpid())
	return out, read
}
