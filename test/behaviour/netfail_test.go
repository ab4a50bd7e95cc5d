package behaviour

import (
	"fmt"
	"net"
	"strings"
	"testing"
)

// TestAllowNetFailures: an allowed host that does not resolve or does not answer is
// recorded beside the refusals, and the session's end says in one line what was
// refused and what failed upstream, on every backend (issue 35.5): a client shows
// only "socket closed", which points away from the proxy.
func TestAllowNetFailures(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, closed, _ := net.SplitHostPort(l.Addr().String())
	l.Close() // nothing listens there now: connection refused
	for _, backend := range backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := newBox(t, backend)
			args := []string{"--no-git-save", "--allow-net", "nowhere.test", "--allow-net", "closed.test:" + closed, "--allow-net", "127.0.0.1:" + closed}
			script := fmt.Sprintf(`curl -sS --max-time 20 http://nowhere.test/ >/dev/null 2>&1
curl -sS --max-time 20 -p http://closed.test:%[1]s/ >/dev/null 2>&1
curl -sS --max-time 20 http://other.test/ >/dev/null 2>&1; true`, closed)
			cmd := b.command(b.repo, args, script)
			cmd.Env = append(cmd.Env, "_AGENTBOX_TEST_HOSTS=closed.test=127.0.0.1,other.test=127.0.0.1")
			r := run(cmd)
			if r.code != 0 {
				t.Fatalf("session failed:\n%s", r)
			}
			want := "agentbox: --allow-net: refused 1 request to other.test; 2 allowed requests failed upstream: nowhere.test (cannot resolve), closed.test (connection refused); agentbox show lists them\n"
			if !strings.Contains(r.stderr, want) {
				t.Errorf("no summary line at the end, want %q:\n%s", want, r)
			}
			log := run(b.fixture().Agentbox(b.repo, "log"))
			lines := strings.Split(strings.TrimSpace(log.stdout), "\n")
			if log.code != 0 || len(lines) < 2 {
				t.Fatalf("agentbox log:\n%s", log)
			}
			show := run(b.fixture().Agentbox(b.repo, "show", strings.Fields(lines[1])[0]))
			for _, w := range []string{"net refused  other.test port 80: not listed (1×)", "net failed   nowhere.test port 80: cannot resolve (1×)",
				"closed.test port " + closed + ": connection refused (1×)"} {
				if !strings.Contains(show.stdout, w) {
					t.Errorf("agentbox show lacks %q:\n%s", w, show.stdout)
				}
			}
		})
	}
}
