package adversarial

import (
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/ptytest"
	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
)

// TestLinesStartAtColumnZero: a command that ends mid-line in raw mode (no output
// processing: its newlines do not return the carriage) leaves the cursor anywhere;
// agentbox's own line after the session starts at column 0 of a line of its own,
// without erasing what the command wrote (issue 35.13).
func TestLinesStartAtColumnZero(t *testing.T) {
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			cmd := b.Command(b.Repo, []string{"--no-git-save", "--no-record"}, "")
			cmd.Args = append(cmd.Args, "--", "/bin/sh", "-c", `sleep 100 & stty raw -echo; printf 'RE''ADY\nhalf a line'`)
			term := ptytest.Start(t, cmd)
			defer term.Close()
			// ptytest's terminal is 200 columns wide: 199 spaces wrap past the
			// command's text, then a carriage return.
			term.Expect(`half a line {199}\ragentbox: killed 1 process left running\r`)
			term.Wait()
		})
	}
}
