package adversarial

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// cttyScript reaches for the controlling terminal through /dev/tty, with SIGTTOU
// ignored so that tcsetattr from the background goes through: it turns echo and
// canonical mode off, which outlive the session, and writes to the terminal.
const cttyScript = `trap "" TTOU
stty -echo -icanon < /dev/tty 2>/dev/null && echo STTY-CHANGED
printf 'SANDBOX-WROTE-TERMINAL\n' 2>/dev/null > /dev/tty && echo WROTE-TERMINAL
echo DONE`

// TestControllingTerminalOutOfStreams: agentbox runs from a terminal (its
// controlling terminal) with none of the command's streams on it (< /dev/null >
// log 2>&1, a script's or an editor's headless run). The command must not reach
// that terminal anyway: no write to it, and no change of its modes, which the
// launcher does not put back for a terminal it did not hand in. The control runs the
// script unsandboxed, where it does both, so the test can fail.
func TestControllingTerminalOutOfStreams(t *testing.T) {
	t.Run("control", func(t *testing.T) {
		b := sandboxtest.NewBox(t, "native")
		out, wrote, changed := withCttyOnly(t, testenv.Command(t, b.Home, "/bin/sh", "-c", cttyScript))
		if !strings.Contains(out, "STTY-CHANGED") || !wrote || !changed {
			t.Fatalf("unsandboxed, the script did not reach its controlling terminal (the test could not fail): wrote %v, modes changed %v\n%s", wrote, changed, out)
		}
	})
	for _, backend := range append(sandboxtest.Backends(t), sandboxtest.NativeGo, sandboxtest.GoAPI) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			cmd := b.Command(b.Repo, []string{"--no-git-save", "--no-record"}, cttyScript)
			out, wrote, changed := withCttyOnly(t, cmd)
			attempts.Add(2)
			if !strings.Contains(out, "DONE") {
				t.Fatalf("session did not run to its end:\n%s", out)
			}
			if strings.Contains(out, "STTY-CHANGED") || strings.Contains(out, "WROTE-TERMINAL") || wrote || changed {
				t.Errorf("the command reached the operator's terminal through /dev/tty: wrote %v, modes changed %v\n%s", wrote, changed, out)
			}
		})
	}
}

// withCttyOnly runs c in a
// session of its own whose controlling terminal is a fresh pseudo-terminal, with
// standard input /dev/null and its output collected apart from the terminal. It
// returns that output, whether anything reached the terminal, and whether the
// terminal's echo or canonical mode changed.
func withCttyOnly(t *testing.T, c *exec.Cmd) (out string, wrote, changed bool) {
	t.Helper()
	master, slave := openPty(t)
	defer master.Close()
	defer slave.Close()
	before, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	c.Stdin, c.Stdout, c.Stderr = nil, &buf, &buf
	c.ExtraFiles = []*os.File{slave} // fd 3: the controlling terminal, then closed by agentbox
	c.SysProcAttr.Setsid, c.SysProcAttr.Setctty, c.SysProcAttr.Ctty = true, true, 3
	var term bytes.Buffer
	done := make(chan struct{})
	go func() { _, _ = io.Copy(&term, master); close(done) }()
	_ = c.Run()
	after, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	slave.Close()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		master.Close()
		<-done
	}
	const modes = unix.ECHO | unix.ICANON
	return buf.String(), strings.Contains(term.String(), "SANDBOX-WROTE-TERMINAL"), before.Lflag&modes != after.Lflag&modes
}
