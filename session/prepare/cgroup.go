package prepare

import (
	"fmt"
	"os"
	"time"

	"github.com/agentbox/agentbox/internal/leafcg"
	"github.com/agentbox/agentbox/policy"
)

// SessionCgroup makes the session's own cgroup (P12: nothing inside reaches the
// launcher's), with the policy's limits where it has any: a host that cannot
// enforce one refuses the launch.
func SessionCgroup(p *policy.Policy) (*leafcg.Leaf, error) {
	return leafcg.Prepare(fmt.Sprintf("agentbox-%d-%d", os.Getpid(), time.Now().UnixNano()), limitsOf(p))
}

func limitsOf(p *policy.Policy) leafcg.Limits {
	return leafcg.Limits{Memory: p.Limits.Memory, Pids: p.Limits.Pids, MilliCPUs: p.Limits.MilliCPUs}
}
