package behaviour

import (
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/ptytest"
	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
)

// TestPromptMarker: an interactive shell inside shows (agentbox) before user@host
// with Debian's default prompt (debian_chroot); a command that is not an
// interactive shell gets no marker, and --unset-env debian_chroot turns it off, on
// every backend (issue 35.12).
func TestPromptMarker(t *testing.T) {
	for _, backend := range backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			shell := func(args ...string) string {
				cmd := b.Command(b.Repo, append([]string{"--no-git-save", "--no-record"}, args...), "")
				cmd.Args = append(cmd.Args, "--", "/bin/bash", "-i")
				term := ptytest.Start(t, cmd)
				defer term.Close()
				term.Send("echo \"marker=[$debian_chroot]\"; exit\n")
				m := term.Expect(`marker=\[([a-z]*)\]`)
				term.Wait()
				return m[1]
			}
			if got := shell(); got != "agentbox" {
				t.Errorf("bash -i on a terminal: debian_chroot=%q, want agentbox", got)
			}
			if got := shell("--unset-env", "debian_chroot"); got != "" {
				t.Errorf("--unset-env debian_chroot: debian_chroot=%q", got)
			}
			if out := b.OK(`echo "marker=[$debian_chroot]"`); !strings.Contains(out, "marker=[]") {
				t.Errorf("sh -c: %s", out)
			}
		})
	}
}
