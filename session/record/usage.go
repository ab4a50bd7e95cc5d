package record

import (
	"fmt"
	"io"

	"github.com/agentbox/agentbox/internal/bytesize"
	"github.com/agentbox/agentbox/internal/leafcg"
	"github.com/agentbox/agentbox/policy"
	"github.com/agentbox/agentbox/shadow"
)

// UsageMeter measures what a session's processes use, from its cgroup: a host
// without cgroup v2 accounting for the session records its usage as not measured
// (the launcher's reaped children would mix in its own Git helpers, and the init is
// reaped after the record).
type UsageMeter struct {
	leaf   *leafcg.Leaf
	limits policy.Limits
}

// StartUsage starts measuring the session's cgroup leaf (nil: none).
func StartUsage(leaf *leafcg.Leaf, lim policy.Limits) *UsageMeter {
	return &UsageMeter{leaf: leaf, limits: lim}
}

// Finish reads what the session used, once its command has ended, and names the
// limit that ended or held it back.
func (m *UsageMeter) Finish() *shadow.Usage {
	if m.leaf == nil {
		return &shadow.Usage{Source: "none: the session has no cgroup v2 cgroup of its own on this host", CPUUsec: -1, PeakMemory: -1, PeakTasks: -1}
	}
	u := m.leaf.Usage()
	out := &shadow.Usage{Source: "cgroup", CPUUsec: u.CPUUsec, PeakMemory: u.PeakMemory, PeakTasks: u.PeakTasks, Throttled: u.Throttled}
	switch {
	case m.limits.Memory > 0 && u.OOMKills > 0:
		out.Limit = "memory limit " + bytesize.Format(m.limits.Memory) + " reached (--memory): the session was killed"
	case m.limits.Pids > 0 && u.PidsRefused > 0:
		out.Limit = fmt.Sprintf("process limit %d reached (--pids): %d forks refused", m.limits.Pids, u.PidsRefused)
	}
	return out
}

// ReportLimit says in one line which limit ended or held back the command.
func ReportLimit(w io.Writer, u *shadow.Usage) {
	if u != nil && u.Limit != "" {
		fmt.Fprintf(w, "agentbox: %s\n", u.Limit)
	}
}
