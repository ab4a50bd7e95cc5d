package behaviour

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A launcher killed with SIGKILL runs no cleanup and leaves its --ssh-agent
// directory below /tmp, with the lock file of its claim beside it (session/leftovers);
// `agentbox gc` removes both, and so does the next --ssh-agent launch of the same
// user, as they remove every other leftover of a killed session.
func TestSSHAgentStaleDir(t *testing.T) {
	s := startSSH(t)
	for _, collector := range []string{"next launch", "gc"} {
		t.Run(collector, func(t *testing.T) {
			b := newBox(t, "native")
			cmd := b.command(b.repo, []string{"--no-git-save", "--ssh-key", "key1"}, `echo "$SSH_AUTH_SOCK"; exec sleep 60`)
			cmd.Env = append(cmd.Env, "SSH_AUTH_SOCK="+s.agent)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			line, err := bufio.NewReader(out).ReadString('\n')
			dir := filepath.Dir(strings.TrimSpace(line))
			_ = cmd.Process.Kill() // SIGKILL: no cleanup runs in the launcher
			cmd.Wait()
			if err != nil || !strings.HasPrefix(dir, "/tmp/agentbox-ssh-") {
				t.Fatalf("SSH_AUTH_SOCK inside: %q %v", line, err)
			}
			for _, p := range []string{dir, dir + ".lock"} {
				if _, err := os.Lstat(p); err != nil {
					t.Fatalf("the killed launcher left no %s behind (%v): nothing to collect", p, err)
				}
			}
			var r result
			if collector == "gc" {
				r = run(b.fixture().Agentbox(b.repo, "gc", "--sessions-older-than", "0"))
				if !strings.Contains(r.stdout, "removed "+dir+" (ssh-agent filter)") {
					t.Errorf("agentbox gc does not say it removed %s:\n%s", dir, r)
				}
			} else {
				again := b.command(b.repo, []string{"--no-git-save", "--ssh-key", "key1"}, "true")
				again.Env = append(again.Env, "SSH_AUTH_SOCK="+s.agent)
				r = run(again)
			}
			if r.code != 0 {
				t.Fatalf("%s:\n%s", collector, r)
			}
			for _, p := range []string{dir, dir + ".lock"} {
				if _, err := os.Lstat(p); !os.IsNotExist(err) {
					t.Errorf("%s, left by the killed launcher, is still there after the %s: %v", p, collector, err)
				}
			}
		})
	}
}
