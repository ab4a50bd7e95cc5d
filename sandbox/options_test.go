package sandbox

import (
	"strings"
	"testing"
)

// TestPlanTmpSizeAndDevices: the Go API's TmpSize and Devices reach the plan as
// agentbox exec's --tmp-size and --device do, and are refused alike.
func TestPlanTmpSizeAndDevices(t *testing.T) {
	if !asTestUser(t) {
		return
	}
	repo := newRepo(t)
	plan, err := Plan(Options{Command: []string{"true"}, Repo: repo, Dir: repo, TmpSize: 8 << 20})
	if err != nil || plan.TmpSize != 8<<20 {
		t.Fatalf("TmpSize 8M: plan budget %d, %v", plan.TmpSize, err)
	}
	for _, c := range []struct {
		opts Options
		want string
	}{
		{Options{TmpSize: -1}, "negative"},
		{Options{TmpSize: 1000}, "below the minimum"},
		{Options{Devices: []string{"/dev/null"}}, "already"},
		{Options{Devices: []string{"/dev/no-such-node"}}, "does not exist"},
	} {
		c.opts.Command, c.opts.Repo, c.opts.Dir = []string{"true"}, repo, repo
		if _, err := Plan(c.opts); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error saying %q", c.opts, err, c.want)
		}
	}
}
