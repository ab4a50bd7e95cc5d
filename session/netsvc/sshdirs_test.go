package netsvc

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Only the calling user's filter directories whose launcher is gone go: not a live
// launcher's, not one whose socket still answers, not a symlink, not another
// user's, not one holding anything but the socket, not a name of another shape.
func TestCollectAgentDirs(t *testing.T) {
	dir := t.TempDir()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	gone := dead.Process.Pid
	mk := func(name string, sock bool) string {
		d := filepath.Join(dir, name)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if sock {
			l, err := net.Listen("unix", filepath.Join(d, "agent.sock"))
			if err != nil {
				t.Fatal(err)
			}
			l.(*net.UnixListener).SetUnlinkOnClose(false)
			l.Close() // left behind as a killed launcher leaves it
		}
		return d
	}
	stale := mk(fmt.Sprintf("agentbox-ssh-%d-1", gone), true)
	empty := mk(fmt.Sprintf("agentbox-ssh-%d-2", gone), false)
	live := mk(fmt.Sprintf("agentbox-ssh-%d-3", os.Getppid()), true)
	answering := mk(fmt.Sprintf("agentbox-ssh-%d-4", gone), false)
	l, err := net.Listen("unix", filepath.Join(answering, "agent.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	full := mk(fmt.Sprintf("agentbox-ssh-%d-5", gone), true)
	os.WriteFile(filepath.Join(full, "other"), nil, 0o600)
	oldShape := mk("agentbox-ssh-123456789", true)
	target := mk("target", true)
	link := filepath.Join(dir, fmt.Sprintf("agentbox-ssh-%d-6", gone))
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	var others string
	if os.Getuid() == 0 {
		others = mk(fmt.Sprintf("agentbox-ssh-%d-7", gone), true)
		if err := os.Chown(others, 1, 1); err != nil {
			t.Fatal(err)
		}
	}

	collectAgentDirs(dir)
	for _, d := range []string{stale, empty} {
		if _, err := os.Lstat(d); !os.IsNotExist(err) {
			t.Errorf("%s: stale, not collected (%v)", d, err)
		}
	}
	for _, d := range []string{live, answering, full, oldShape, target, filepath.Join(target, "agent.sock"), link, others} {
		if d == "" {
			continue
		}
		if _, err := os.Lstat(d); err != nil {
			t.Errorf("%s: collected: %v", d, err)
		}
	}
}
