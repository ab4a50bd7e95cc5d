package adversarial

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
)

// TestSelfStopWithoutTerminal: a command that stops itself (`kill -STOP $$`) in a
// session with no terminal — a script, CI, a Go API caller — must not stop the
// launcher: no shell could resume it, so it would take only SIGKILL, which skips the
// session's audit, and through the Go API the caller's whole process would stop.
// The command is continued and the session ends as it would. The launcher's state is
// watched until the session ends (a stopped launcher never would).
func TestSelfStopWithoutTerminal(t *testing.T) {
	for _, backend := range append(sandboxtest.Backends(t), sandboxtest.GoAPI) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			cmd := b.Command(b.Repo, nil, `kill -STOP $$; echo RESUMED`)
			res := startCmd(t, cmd)
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case r := <-res:
					if r.Code != 0 || !strings.Contains(r.Stdout, "RESUMED") {
						t.Errorf("the session did not go on after its command stopped itself: %s", r)
					}
					return
				case <-tick.C:
					if st := procState(cmd.Process.Pid); st == "T" {
						_ = cmd.Process.Signal(os.Kill)
						t.Fatalf("the launcher (pid %d) stopped itself with its command, with no terminal to resume it: %s", cmd.Process.Pid, <-res)
					}
				}
			}
		})
	}
}

// procState is the state letter of /proc/PID/stat, "" when it cannot be read.
func procState(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+3 > len(s) {
		return ""
	}
	return s[i+2 : i+3]
}
