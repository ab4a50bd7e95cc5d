package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/agentbox/agentbox/internal/leafcg"
)

// doctorLimit says whether this host can enforce one of --memory, --pids, --cpus
// for the user running doctor, and if not, why and the fix.
type doctorLimit struct {
	Flag   string `json:"flag"`
	OK     bool   `json:"ok"`
	Reason string `json:"reason,omitempty"`
}

// probeLimits checks each limit alone, as a launch with it would (leafcg.Check).
func probeLimits() []doctorLimit {
	var out []doctorLimit
	for _, l := range []struct {
		flag string
		lim  leafcg.Limits
	}{
		{"--memory", leafcg.Limits{Memory: 1}},
		{"--pids", leafcg.Limits{Pids: 1}},
		{"--cpus", leafcg.Limits{MilliCPUs: 1}},
	} {
		err := leafcg.Check(l.lim)
		d := doctorLimit{Flag: l.flag, OK: err == nil}
		var le *leafcg.LimitError
		switch {
		case errors.As(err, &le):
			d.Reason = le.Reason + "; " + le.Fix
		case err != nil:
			d.Reason = err.Error()
		}
		out = append(out, d)
	}
	return out
}

func printLimits(w io.Writer, limits []doctorLimit) {
	fmt.Fprintf(w, "\nresource limits (a cgroup of the session's own):\n")
	for _, l := range limits {
		if l.OK {
			fmt.Fprintf(w, "  %-9s %s can be enforced\n", "ok", l.Flag)
			continue
		}
		fmt.Fprintf(w, "  %-9s %s is refused here: %s\n", "no", l.Flag, l.Reason)
	}
}
