package behaviour

import (
	"strings"
	"testing"
)

// TestGitConfigReadOnlyHint: a Git command that writes .git/config inside fails
// with "Device or resource busy" (P7's read-only bind); the git agentbox puts inside
// says why in one line, and says nothing when Git failed otherwise (issue 35.9).
func TestGitConfigReadOnlyHint(t *testing.T) {
	const hint = "agentbox: .git/config is read-only inside the sandbox"
	for _, backend := range backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := newBox(t, backend)
			rows := []struct {
				script string
				hint   bool
			}{
				{"git config user.name someone", true},
				{"git remote add origin https://example.invalid/r.git", true},
				{"git config --get no.such-key", false},
				{"git config --global user.name someone", false},
				{"git branch --set-upstream-to=nowhere/main", false},
			}
			for _, r := range rows {
				res := run(b.command(b.repo, []string{"--no-record", "--no-git-save"}, r.script+"; echo status=$?"))
				if res.code != 0 || strings.Contains(res.stdout, "status=0") != (r.script == "git config --global user.name someone") {
					t.Errorf("%s: %s", r.script, res)
				}
				if got := strings.Count(res.stderr, hint); got != map[bool]int{true: 1, false: 0}[r.hint] {
					t.Errorf("%s: the hint %d times, want it %v:\n%s", r.script, got, r.hint, res)
				}
			}
		})
	}
}
