package adversarial

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/nsinit/program"
)

// TestInitHoldsNoInheritedDescriptor: a launcher (agentbox exec, or a program
// using the Go API) started with descriptors open and not close-on-exec — a
// shell's redirection, a caller's open file, what a service manager hands down —
// must not carry them into the sandbox. The command never got them, but the Go
// init, PID 1 of the sandbox, kept them open for the whole session (it only marked
// them close-on-exec): a host directory outside every grant and a host file,
// held inside, against the rule that the init holds no descriptor of the host's.
// Nor does it hold the host's cgroup files, which the Go runtime keeps open to
// follow the CPU limit.
// The session's processes (the launcher's descendants in another PID namespace)
// are checked from the host while it runs, every runner, and the Go init once more
// with the old-kernel fallbacks (program.EnvFallbacks): there the launcher's start
// marks the descriptors by a walk of /proc/self/fd instead of close_range.
func TestInitHoldsNoInheritedDescriptor(t *testing.T) {
	type row struct {
		name, runner string
		env          []string
	}
	var rows []row
	for _, runner := range everyRunner(t) {
		rows = append(rows, row{name: runner, runner: runner})
	}
	rows = append(rows, row{name: sandboxtest.NativeGo + "-fallbacks", runner: sandboxtest.NativeGo, env: []string{program.EnvFallbacks + "=1"}})
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			b := sandboxtest.NewBox(t, r.runner)
			outside := testenv.Dir(t, "outside")
			secret := filepath.Join(outside, "file")
			sandboxtest.WriteFile(t, secret, "host\n")
			testenv.Chown(t, outside)
			var files []*os.File
			for _, p := range []string{os.DevNull, outside, secret, outside} {
				f, err := os.Open(p)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				files = append(files, f)
			}
			// Enough entries that the audit walk lstats them through rings
			// (gitguard/audit's ringAfterEntries).
			walked := filepath.Join(b.Repo, "walked")
			if err := os.Mkdir(walked, 0o755); err != nil {
				t.Fatal(err)
			}
			for i := range 4200 {
				sandboxtest.WriteFile(t, filepath.Join(walked, fmt.Sprintf("f%d", i)), "x\n")
			}
			ready := filepath.Join(b.Repo, "ready")
			cmd := b.Command(b.Repo, []string{"--no-git-save"}, `touch ready; read x || true`)
			cmd.ExtraFiles = files // descriptors 3 to 6 of the launcher
			cmd.Env = append(cmd.Env, r.env...)
			release := holdSession(t, cmd, ready, "started")
			var held []string
			// The audit walk's io_uring rings (gitguard/audit) are closed before
			// the command starts: a ring runs its requests with its creator's
			// credentials and files, so none may be held while the sandbox runs.
			for _, target := range fdTargets(cmd.Process.Pid) {
				if target == ioURing {
					held = append(held, fmt.Sprintf("the launcher (pid %d) holds %s", cmd.Process.Pid, target))
				}
			}
			hostNS := pidNS(cmd.Process.Pid)
			for _, pid := range descendants(cmd.Process.Pid) {
				if ns := pidNS(pid); ns == "" || ns == hostNS {
					continue // the launcher's own helpers on the host (its Git)
				}
				for _, target := range fdTargets(pid) {
					if target == outside || target == secret || target == ioURing || strings.HasPrefix(target, "/sys/fs/cgroup/") {
						held = append(held, fmt.Sprintf("%s (pid %d) holds %s", comm(pid), pid, target))
					}
				}
			}
			if r := release(); r.Code != 0 {
				t.Errorf("the session failed:\n%s", r)
			}
			if len(held) > 0 {
				t.Errorf("a process of the session holds what its launcher inherited:\n%s", strings.Join(held, "\n"))
			}
		})
	}
}

// descendants lists pid's descendants, children first.
func descendants(pid int) []int {
	var out []int
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, task := range tasks {
		for _, f := range strings.Fields(sandboxtest.ReadFileOr(task)) {
			if child, err := strconv.Atoi(f); err == nil {
				out = append(out, child)
				out = append(out, descendants(child)...)
			}
		}
	}
	return out
}

// fdTargets lists what pid's descriptors lead to.
// ioURing is an io_uring descriptor's /proc/PID/fd target.
const ioURing = "anon_inode:[io_uring]"

func fdTargets(pid int) []string {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, _ := os.ReadDir(dir)
	var out []string
	for _, e := range ents {
		if target, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil {
			out = append(out, target)
		}
	}
	return out
}

// pidNS names pid's PID namespace; "" when it is gone.
func pidNS(pid int) string {
	ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
	return ns
}

// comm is pid's command name.
func comm(pid int) string {
	return strings.TrimSpace(sandboxtest.ReadFileOr(fmt.Sprintf("/proc/%d/comm", pid)))
}
