package adversarial

import (
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/testkit/ptytest"
	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// stealForeground waits until it is in the background of its controlling terminal
// (fd 2), then makes its own process group the terminal's foreground with SIGTTOU
// ignored, as a background job may, says so, and ends a moment later.
const stealForeground = `use POSIX;
$SIG{TTOU} = "IGNORE";
print "RE", "ADY\n";
select(undef, undef, undef, 0.05) while POSIX::tcgetpgrp(2) == getpgrp();
POSIX::tcsetpgrp(2, getpgrp()) or die "tcsetpgrp: $!\n";
print "STO", "LEN\n";
sleep 1;
`

// TestForegroundStolenFromBackgroundGivenBack: agentbox in the background of an
// interactive bash — started with & or put there with Ctrl-Z and bg — whose command
// takes the terminal's foreground (tcsetpgrp with SIGTTOU ignored) and ends. The
// operator types nothing meanwhile. When agentbox ends, the terminal's foreground is
// the shell's again and the shell goes on. On main the foreground stayed with the
// command's empty group: bash, woken by agentbox's end, read EIO and exited — the
// operator's shell (and its terminal tab) gone. What the command reads if the
// operator types while it holds the terminal is not covered (docs/terminal.md).
func TestForegroundStolenFromBackgroundGivenBack(t *testing.T) {
	if _, err := exec.LookPath("perl"); err != nil {
		testenv.Skip(t, "perl missing")
	}
	for _, backend := range sandboxtest.Backends(t) {
		for _, how := range []string{"&", "bg"} {
			t.Run(backend+"/"+how, func(t *testing.T) {
				b := sandboxtest.NewBox(t, backend)
				sandboxtest.WriteFile(t, filepath.Join(b.Repo, "steal.pl"), stealForeground)
				testenv.Chown(t, b.Repo)
				term := shellFor(t, b)
				shell := term.Cmd.Process.Pid
				if how == "&" {
					term.Send(execLine(b, `exec perl steal.pl`) + " &\n")
				} else {
					term.Send(execLine(b, `exec perl steal.pl`) + "\n")
					term.Expect(`READY\r\n`)
					term.Send("\x1a")
					term.Expect(`Stopped[^\n]*\n` + ptytest.Prompt)
					term.Send("bg >/dev/null\n")
				}
				term.Expect(`STOLEN\r\n`)
				launcher := childOf(t, shell)
				// A bound against a hang, not a timing check.
				if !sandboxtest.WaitForUpTo(60*time.Second, func() bool { return ended(launcher) }) {
					t.Fatalf("agentbox did not end")
				}
				if pgrp, err := term.Foreground(); err != nil || pgrp != shell {
					t.Errorf("the terminal's foreground after the session: %d (%v), want the shell's %d", pgrp, err, shell)
				}
				// The shell reads and runs a line: its output, not some earlier prompt.
				term.Send(`echo "sh""ell ok"` + "\n")
				if _, err := term.ExpectErr(`shell ok\r\n`); err != nil {
					t.Errorf("the shell after the session: %v", err)
				}
			})
		}
	}
}
