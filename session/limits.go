package session

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/leafcg"
	"github.com/agentbox/agentbox/policy"
	"github.com/agentbox/agentbox/shadow"
)

// sessionCgroup makes the session's own cgroup (P12: nothing inside reaches the
// launcher's), with the policy's limits where it has any: a host that cannot
// enforce one refuses the launch.
func sessionCgroup(p *policy.Policy) (*leafcg.Leaf, error) {
	return leafcg.Prepare(fmt.Sprintf("agentbox-%d-%d", os.Getpid(), time.Now().UnixNano()), limitsOf(p))
}

// checkLimits refuses limits this host cannot enforce (leafcg.Check).
func checkLimits(p *policy.Policy) error {
	return leafcg.Check(limitsOf(p))
}

func limitsOf(p *policy.Policy) leafcg.Limits {
	return leafcg.Limits{Memory: p.Limits.Memory, Pids: p.Limits.Pids, MilliCPUs: p.Limits.MilliCPUs}
}

// usageMeter measures what a session's processes use: from its cgroup where the
// kernel counts it there, else from the launcher's reaped children.
type usageMeter struct {
	leaf   *leafcg.Leaf
	limits policy.Limits
	before unix.Rusage
}

func startUsage(leaf *leafcg.Leaf, lim policy.Limits) *usageMeter {
	m := &usageMeter{leaf: leaf, limits: lim}
	_ = unix.Getrusage(unix.RUSAGE_CHILDREN, &m.before)
	return m
}

// finish reads what the session used, once its command has ended, and names the
// limit that ended or held it back.
func (m *usageMeter) finish() *shadow.Usage {
	u := leafcg.Usage{CPUUsec: -1, PeakMemory: -1, PeakTasks: -1, OOMKills: -1, PidsRefused: -1, Throttled: -1}
	if m.leaf != nil {
		u = m.leaf.Usage()
	}
	out := &shadow.Usage{CPUUsec: u.CPUUsec, PeakMemory: u.PeakMemory, PeakTasks: u.PeakTasks, Throttled: u.Throttled}
	var after unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_CHILDREN, &after)
	var src []string
	if out.CPUUsec < 0 {
		// The reaped children: the Go init with all it reaped, and the
		// launcher's own Git helpers meanwhile (a raw init is reaped later).
		cpu := tvUsec(after.Utime) + tvUsec(after.Stime) - tvUsec(m.before.Utime) - tvUsec(m.before.Stime)
		if cpu > 0 {
			out.CPUUsec = cpu
			src = append(src, "cpu: rusage of the launcher's children")
		}
	}
	if out.PeakMemory < 0 && after.Maxrss > m.before.Maxrss {
		out.PeakMemory = after.Maxrss << 10
		src = append(src, "peak memory: rusage, largest single process")
	}
	out.Source = "cgroup"
	if len(src) > 0 {
		out.Source = strings.Join(src, "; ")
		if m.leaf != nil {
			out.Source = "cgroup; " + out.Source
		}
	} else if m.leaf == nil {
		out.Source = "none"
	}
	switch {
	case m.limits.Memory > 0 && u.OOMKills > 0:
		out.Limit = "memory limit " + policy.FormatSize(m.limits.Memory) + " reached (--memory): the session was killed"
	case m.limits.Pids > 0 && u.PidsRefused > 0:
		out.Limit = fmt.Sprintf("process limit %d reached (--pids): %d forks refused", m.limits.Pids, u.PidsRefused)
	}
	return out
}

func tvUsec(t unix.Timeval) int64 { return int64(t.Sec)*1e6 + int64(t.Usec) }

// reportLimit says in one line which limit ended or held back the command.
func reportLimit(w io.Writer, u *shadow.Usage) {
	if u != nil && u.Limit != "" {
		fmt.Fprintf(w, "agentbox: %s\n", u.Limit)
	}
}
