package adversarial

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
)

// TestStderrReaderGone: agentbox exec … 2>&1 | head — the reader of the pipe that is
// the launcher's standard error goes away once the command has written enough, as
// head does after its lines. The command leaves a process behind, so the launcher
// has a line of its own to write after the session ("killed 1 process left
// running"). That write fails; the launcher must still finish its work — here,
// remove the session's --disk-tmp directory (P10) — and end with the command's
// status, not by SIGPIPE. On every runner and the Go API, whose caller died too.
func TestStderrReaderGone(t *testing.T) {
	runners := everyRunner(t)
	for _, backend := range runners {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			cmd := b.Command(b.Repo, []string{"--disk-tmp", "--no-git-save", "--no-record"}, "sleep 300 & seq 1000000")
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stdout, cmd.Stderr = w, w
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			w.Close()
			ended := make(chan error, 1)
			go func() { ended <- cmd.Wait() }()
			line, _ := bufio.NewReader(r).ReadString('\n')
			r.Close() // the reader is gone, as head's after its lines
			var werr error
			select {
			case werr = <-ended:
			case <-time.After(time.Minute):
				_ = cmd.Process.Kill()
				t.Fatalf("the launcher did not end after its reader went away (first line %q)", line)
			}
			var ee *exec.ExitError
			if errors.As(werr, &ee) {
				if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
					t.Errorf("the launcher died by %v when its standard error's reader was gone (its work after the command cut short)", ws.Signal())
				}
			} else if werr != nil {
				t.Fatal(werr)
			}
			if d := diskTmpDirs(b.Home); len(d) != 0 {
				t.Errorf("--disk-tmp directory left behind: %v", d)
			}
		})
	}
}
