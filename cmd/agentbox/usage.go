package main

import (
	"fmt"
	"github.com/agentbox/agentbox/internal/bytesize"
	"strings"
	"time"

	"github.com/agentbox/agentbox/policy"
	"github.com/agentbox/agentbox/shadow"
)

// limitsLine is the record's --memory, --pids and --cpus, "" when it had none.
func limitsLine(p shadow.Policy) string {
	var parts []string
	if p.Memory > 0 {
		parts = append(parts, "memory "+bytesize.Format(p.Memory))
	}
	if p.Pids > 0 {
		parts = append(parts, fmt.Sprintf("pids %d", p.Pids))
	}
	if p.MilliCPUs > 0 {
		parts = append(parts, "cpus "+policy.FormatCPUs(p.MilliCPUs))
	}
	return strings.Join(parts, ", ")
}

// usageLine is what a session used, each figure the kernel reported, and where
// it was measured.
func usageLine(u shadow.Usage) string {
	var parts []string
	if u.CPUUsec >= 0 {
		parts = append(parts, "CPU "+(time.Duration(u.CPUUsec)*time.Microsecond).Round(time.Millisecond).String())
	}
	if u.PeakMemory >= 0 {
		parts = append(parts, "peak memory "+bytesize.Format(u.PeakMemory))
	}
	if u.PeakTasks >= 0 {
		parts = append(parts, fmt.Sprintf("peak tasks %d", u.PeakTasks))
	}
	if u.Throttled > 0 {
		parts = append(parts, fmt.Sprintf("throttled in %d periods", u.Throttled))
	}
	if len(parts) == 0 {
		parts = append(parts, "not measured")
	}
	line := strings.Join(parts, ", ") + " (" + u.Source + ")"
	if u.Limit != "" {
		line += "; " + u.Limit
	}
	return line
}
