package adversarial

import (
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/nsinit"
)

// TestRepoFileKeepsNetNamespace (issue 30): a session started with --allow-net
// writes allow-net = [] to the repository's .agentbox.toml, a subset of the user's
// hosts that would mean no network namespace at all. The next session with the same
// command must keep its namespace or be refused; it is refused, with one line naming
// the file, its line and the key, and the host's loopback service it tries stays
// unreached. A file that really narrows (offline = true beside it, or the same host)
// runs, and from inside the host's loopback is unreachable; on every backend.
func TestRepoFileKeepsNetNamespace(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var reached atomic.Int32
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			reached.Add(1)
			c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	// bash for /dev/tcp; the mark says whether the command ran at all.
	probe := fmt.Sprintf(`touch ran; if /bin/bash -c 'exec 3<>/dev/tcp/127.0.0.1/%s' 2>/dev/null; then echo REACHED; else echo unreachable; fi`, port)
	args := []string{"--allow-net", "example.test", "--no-git-save", "--no-record"}
	backends := sandboxtest.Backends(t)
	if nsinit.RawInitAvailable() {
		backends = append(backends, sandboxtest.NativeGo) // offline = true runs the raw init otherwise
	}
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			repoFile := filepath.Join(b.Repo, ".agentbox.toml")
			ran := filepath.Join(b.Repo, "ran")
			b.OK(`printf 'allow-net = []\n' > .agentbox.toml`, args...)
			r := b.Sh(probe, args...)
			if r.Code != 125 || !strings.Contains(r.Stderr, "config "+repoFile+":1: allow-net: would remove the sandbox's network namespace") ||
				strings.Count(strings.TrimSpace(r.Stderr), "\n") > 0 {
				t.Errorf("allow-net = [] written by a session: want 125 and one line naming the file, line and key, got %s", r)
			}
			if sandboxtest.Exists(ran) || strings.Contains(r.Stdout, "REACHED") || reached.Load() != 0 {
				t.Fatalf("the session ran with allow-net = [] (host loopback reached %d times):\n%s", reached.Load(), r)
			}
			for _, narrow := range []string{"allow-net = []\noffline = true\n", "allow-net = [\"example.test\"]\n"} {
				sandboxtest.WriteFile(t, repoFile, narrow)
				testenv.Chown(t, repoFile)
				r := b.Sh(probe, args...)
				if r.Code != 0 || !strings.Contains(r.Stdout, "unreachable") || reached.Load() != 0 {
					t.Errorf("%q: want the session to run without the host's loopback (reached %d times), got %s", narrow, reached.Load(), r)
				}
			}
		})
	}
}
