package prepare

import (
	"fmt"
	"os"
	"time"

	"github.com/agentbox/agentbox/internal/leafcg"
	"github.com/agentbox/agentbox/policy"
)

// SessionCgroup makes the session's own cgroup (P12: nothing inside reaches the
// launcher's), with the policy's limits where it has any, where New found this
// process in the cgroup tree: a host that cannot enforce one refuses the launch.
func (pr *Prepared) SessionCgroup(p *policy.Policy) (*leafcg.Leaf, error) {
	return pr.cgroup.Prepare(fmt.Sprintf("agentbox-%d-%d", os.Getpid(), time.Now().UnixNano()), limitsOf(p))
}

func limitsOf(p *policy.Policy) leafcg.Limits {
	return leafcg.Limits{Memory: p.Limits.Memory, Pids: p.Limits.Pids, MilliCPUs: p.Limits.MilliCPUs}
}
