package netsvc

import (
	"fmt"
	"io"
	"strings"

	"github.com/agentbox/agentbox/shadow"
)

// Report says on w in one line, at the session's end, what the proxy refused and which
// allowed hosts could not be reached: a client shows only "socket closed" or a DNS
// error, which points away from --allow-net.
func Report(w io.Writer, rows []shadow.NetRefusal) {
	var refused, failed []string
	nr, nf := 0, 0
	for _, r := range rows {
		what := fmt.Sprintf("%s (%s)", r.Host, r.Reason)
		if r.Failed {
			nf += r.Count
			if len(failed) < 3 {
				failed = append(failed, what)
			}
		} else {
			nr += r.Count
			if len(refused) < 3 {
				refused = append(refused, r.Host)
			}
		}
	}
	var parts []string
	if nr > 0 {
		parts = append(parts, fmt.Sprintf("refused %d %s to %s", nr, plural(nr, "request"), strings.Join(refused, ", ")))
	}
	if nf > 0 {
		parts = append(parts, fmt.Sprintf("%d allowed %s failed upstream: %s", nf, plural(nf, "request"), strings.Join(failed, ", ")))
	}
	if len(parts) > 0 {
		fmt.Fprintf(w, "agentbox: --allow-net: %s; agentbox show lists them\n", strings.Join(parts, "; "))
	}
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
