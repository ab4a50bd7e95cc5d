package behaviour

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A launcher killed with SIGKILL runs no cleanup and leaves its --ssh-agent
// directory below /tmp; the next --ssh-agent launch of the same user removes it.
func TestSSHAgentStaleDir(t *testing.T) {
	s := startSSH(t)
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
	sock := strings.TrimSpace(line)
	dir := filepath.Dir(sock)
	_ = cmd.Process.Kill() // SIGKILL: no cleanup runs in the launcher
	cmd.Wait()
	if err != nil || !strings.HasPrefix(dir, "/tmp/agentbox-ssh-") {
		t.Fatalf("SSH_AUTH_SOCK inside: %q %v", line, err)
	}
	if _, err := os.Lstat(dir); err != nil {
		t.Fatalf("the killed launcher left no directory behind (%v): nothing to collect", err)
	}
	again := b.command(b.repo, []string{"--no-git-save", "--ssh-key", "key1"}, "true")
	again.Env = append(again.Env, "SSH_AUTH_SOCK="+s.agent)
	r := run(again)
	if r.code != 0 {
		t.Fatalf("second launch:\n%s", r)
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Errorf("%s, left by the killed launcher, is still there after the next launch: %v", dir, err)
	}
}
