package nsinit

import (
	"os"
	"slices"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/mounts"
)

// TestUserLimitsEveryRunner: every runner of the compiled plan puts the plan's user
// limits on the sandbox before the command, which can neither write them back nor
// raise a hard resource limit; a plan naming anything else is refused.
func TestUserLimitsEveryRunner(t *testing.T) {
	if !testenv.AsTestUser(t) {
		return
	}
	null := devNull(t)
	limits := []mounts.UserLimit{
		{Name: "max_inotify_instances", Max: 7},
		{Name: "max_user_namespaces", Max: 9},
		{Name: "rlimit_sigpending", Max: 123},
	}
	script := `test "$(cat /proc/sys/user/max_inotify_instances)" = 7 &&
		test "$(cat /proc/sys/user/max_user_namespaces)" = 9 &&
		grep -Eq '^Max pending signals +123 +123 ' /proc/self/limits &&
		! (echo 100 > /proc/sys/user/max_inotify_instances) 2>/dev/null &&
		command -v prlimit >/dev/null && ! prlimit --pid $$ --sigpending=124:124 2>/dev/null`
	for _, r := range runners() {
		t.Run(r.name, func(t *testing.T) {
			r.setEnv(t)
			if r.raw {
				waitRawFree(t)
			}
			plan := minimalPlan("/bin/sh", "-c", script)
			plan.Ops = append(plan.Ops, r.extra...)
			plan.UserLimits = limits
			res, err := Run(plan, Options{Stdio: Stdio{Stdin: null, Stdout: os.Stderr, Stderr: os.Stderr}, RawInit: r.raw})
			if err != nil || res.Status != 0 {
				t.Fatalf("the limits inside: %v, status %d", err, res.Status)
			}
			if !slices.Contains(phaseNames(res), r.phase) || !slices.Contains(phaseNames(res), "user-limits") {
				t.Errorf("phases %v, want %q and user-limits", phaseNames(res), r.phase)
			}
			for _, bad := range []string{"../../proc/sys/kernel/core_pattern", "rlimit_nofile"} {
				plan.UserLimits = []mounts.UserLimit{{Name: bad, Max: 1}}
				if r.raw {
					waitRawFree(t)
				}
				if _, err := Run(plan, Options{Stdio: Stdio{Stdin: null, Stdout: null, Stderr: null}, RawInit: r.raw}); err == nil {
					t.Errorf("a plan with the limit %q ran", bad)
				}
			}
		})
	}
}
