package prepare

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/agentbox/agentbox/internal/leafcg"
	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/policy"
)

// limitsPolicy is a read-only session of a fresh directory: New then reads the
// host, protects nothing and stages nothing.
func limitsPolicy(t *testing.T) *policy.Policy {
	repo, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return &policy.Policy{Repo: repo, Workdir: repo, Home: t.TempDir(), Command: []string{"true"}, ReadOnly: true}
}

// The user limits and the pty pool are read once the placeholders have let the
// audit's baseline start (ForLaunch, ForDryRun), not by New before it; a limit
// that cannot be read still refuses the launch, from there.
func TestUserLimitsReadAfterNew(t *testing.T) {
	refused := errors.New("read the user's kernel count limits: refused by the test")
	reads := 0
	saved := userLimits
	userLimits = func() ([]mounts.UserLimit, error) {
		reads++
		return nil, refused
	}
	t.Cleanup(func() { userLimits = saved })
	p := limitsPolicy(t)
	pr, err := New(Options{}, p)
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	if reads != 0 {
		t.Fatalf("New read the user limits (%d times); the baseline would wait for them", reads)
	}
	if err := pr.ForDryRun(Options{}, p); !errors.Is(err, refused) || reads != 1 {
		t.Fatalf("ForDryRun with an unreadable limit: %v after %d reads, want the limit's error after one", err, reads)
	}
}

// What the limits' read found reaches the session the plan is built from, and,
// for a session without resource limits, where this process is in the cgroup
// tree reaches SessionCgroup.
func TestUserLimitsReachThePlan(t *testing.T) {
	p := limitsPolicy(t)
	pr, err := New(Options{}, p)
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	if err := pr.ForDryRun(Options{}, p); err != nil {
		t.Fatal(err)
	}
	if len(pr.Session.UserLimits) == 0 || pr.Session.PtyMax <= 0 {
		t.Fatalf("session after ForDryRun: %d user limits, PtyMax %d; want the host's shares", len(pr.Session.UserLimits), pr.Session.PtyMax)
	}
	if want, err := leafcg.Probe(); err != nil || pr.cgroup != want || want.Mount == "" {
		t.Fatalf("cgroup after ForDryRun: %+v, want %+v (%v)", pr.cgroup, want, err)
	}
	plan := pr.Plan(p)
	if len(plan.UserLimits) != len(pr.Session.UserLimits) || plan.PtyMax != pr.Session.PtyMax {
		t.Fatalf("plan: %d user limits, PtyMax %d; want the session's %d and %d", len(plan.UserLimits), plan.PtyMax, len(pr.Session.UserLimits), pr.Session.PtyMax)
	}
}
