package prepare

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

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

// The user limits and the pty pool are read beside the steps after New (the
// audit's baseline among them), not before them; a limit that cannot be read
// still refuses the launch, from ForLaunch or ForDryRun.
func TestUserLimitsReadBesideNew(t *testing.T) {
	release := make(chan struct{})
	refused := errors.New("read the user's kernel count limits: refused by the test")
	saved := userLimits
	userLimits = func() ([]mounts.UserLimit, error) {
		<-release
		return nil, refused
	}
	t.Cleanup(func() { userLimits = saved })
	p := limitsPolicy(t)
	type result struct {
		pr  *Prepared
		err error
	}
	got := make(chan result, 1)
	go func() {
		pr, err := New(Options{}, p)
		got <- result{pr, err}
	}()
	var r result
	select {
	case r = <-got:
	case <-time.After(20 * time.Second):
		close(release)
		t.Fatal("New waited for the user limits' read")
	}
	close(release)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if err := r.pr.ForDryRun(Options{}, p); !errors.Is(err, refused) {
		t.Fatalf("ForDryRun with an unreadable limit: %v, want the limit's error", err)
	}
	r.pr.Close()
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
