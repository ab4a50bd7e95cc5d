package behaviour

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestAllowSocket: --allow-socket (issue 16) on every backend — a host socket in a
// directory of its own below /tmp (as ssh-agent makes) is reachable inside at its
// own path, read-only (it cannot be replaced by the sandbox's own listener), and
// SSH_AUTH_SOCK is passed only when its socket is handed in; bad paths get 125.
func TestAllowSocket(t *testing.T) {
	if _, err := exec.LookPath("socat"); err != nil {
		testenv.Skip(t, "socat missing (scripts/setup-test-env.sh installs it)")
	}
	for _, backend := range backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			dir := testenv.Dir(t, "sock")
			// Below /tmp, like ssh-agent's: the private /tmp hides it unless handed in.
			tmp, err := os.MkdirTemp("/tmp", "agentbox-sock-")
			if err != nil {
				t.Fatal(err)
			}
			defer os.RemoveAll(tmp)
			testenv.Chown(t, tmp)
			sock := filepath.Join(tmp, "agent.1")
			srv := testenv.Command(t, b.Home, "socat", "UNIX-LISTEN:"+sock+",fork", "SYSTEM:echo pong")
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { srv.Process.Kill(); srv.Wait() }()
			if !sandboxtest.WaitFor(func() bool { fi, err := os.Lstat(sock); return err == nil && fi.Mode()&os.ModeSocket != 0 }) {
				t.Fatal("socat did not listen")
			}
			cmd := b.Command(b.Repo, []string{"--allow-socket", sock}, `echo "ssh=$SSH_AUTH_SOCK"; socat - UNIX-CONNECT:"$SSH_AUTH_SOCK" </dev/null
rm -f "$SSH_AUTH_SOCK" 2>/dev/null && echo replaced; true`)
			cmd.Env = append(cmd.Env, "SSH_AUTH_SOCK="+sock)
			r := sandboxtest.Run(cmd)
			if r.Code != 0 || !strings.Contains(r.Stdout, "ssh="+sock+"\npong\n") || strings.Contains(r.Stdout, "replaced") {
				t.Errorf("handed in:\n%s", r)
			}
			cmd = b.Command(b.Repo, nil, `echo "ssh=$SSH_AUTH_SOCK"; test -e `+sock+` && echo visible; true`)
			cmd.Env = append(cmd.Env, "SSH_AUTH_SOCK="+sock)
			if r := sandboxtest.Run(cmd); r.Stdout != "ssh=\n" {
				t.Errorf("not handed in: want SSH_AUTH_SOCK unset and the socket hidden:\n%s", r)
			}

			writeUser(t, dir+"/file", "")
			if err := os.Symlink(tmp, dir+"/link"); err != nil {
				t.Fatal(err)
			}
			writeUser(t, tmp+"/other", "")
			for _, c := range []struct{ arg, why string }{
				{dir + "/file", "is not a Unix socket"},
				{"rel/sock", "is not an absolute path"},
				{dir + "/link/agent.1", "has a symlink in its path"},
				{sock, "shares its directory"},
				{dir + "/missing", "does not exist"},
			} {
				r := sandboxtest.Run(b.Command(b.Repo, []string{"--allow-socket", c.arg}, "echo RAN"))
				if lines := strings.Split(strings.TrimSpace(r.Stderr), "\n"); r.Code != 125 || len(lines) != 1 || !strings.Contains(r.Stderr, c.why) {
					t.Errorf("--allow-socket %s: want 125 and one line with %q, got %s", c.arg, c.why, r)
				}
			}
		})
	}
}
