package leafcg

import (
	"path/filepath"
)

// Usage is what the session's cgroup counted, read when the command has ended;
// -1 in a field the kernel does not report here (an older kernel, or a controller
// the session's cgroup does not have).
type Usage struct {
	CPUUsec    int64 // cpu.stat usage_usec: CPU time of every process of the session
	PeakMemory int64 // memory.peak, bytes (Linux 5.19)
	PeakTasks  int64 // pids.peak (Linux 6.1)
	// OOMKills is memory.events oom_kill: processes killed at the memory limit.
	OOMKills int64
	// PidsRefused is pids.events max: forks refused at the pids limit.
	PidsRefused int64
	// Throttled is cpu.stat nr_throttled: periods in which --cpus held it back.
	Throttled int64
}

// Usage reads the session's counters from its cgroup (Top, whose accounting
// holds the whole session).
func (l *Leaf) Usage() Usage {
	stat := readFile(filepath.Join(l.Top, "cpu.stat"))
	u := Usage{
		CPUUsec:     keyed(stat, "usage_usec"),
		Throttled:   keyed(stat, "nr_throttled"),
		PeakMemory:  single(filepath.Join(l.Top, "memory.peak")),
		PeakTasks:   single(filepath.Join(l.Top, "pids.peak")),
		OOMKills:    keyed(readFile(filepath.Join(l.Top, "memory.events")), "oom_kill"),
		PidsRefused: keyed(readFile(filepath.Join(l.Top, "pids.events")), "max"),
	}
	return u
}

// single reads a control file holding one number; -1 when it is missing or holds
// something else ("max").
func single(p string) int64 {
	v := keyed("v "+readFile(p), "v")
	return v
}
