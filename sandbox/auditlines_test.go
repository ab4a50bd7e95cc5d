package sandbox

import (
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/termsafe"
)

// plantHostileNames makes, in the repository $1, a nested repository whose config
// names a filter by a subsection holding an OSC 52 clipboard write, an 8-bit CSI
// (U+009B) and a right-to-left override, and whose hook's file name holds an escape
// sequence and a newline followed by a line made to look like agentbox's own; the
// hook and the filter run ./tool. Each is a finding of the audit.
const plantHostileNames = `cd "$1" && git init -q sub &&
printf '[filter "x\033]52;c;cHduZWQ=\007\302\233\342\200\256"]\n\tclean = ./tool\n' > sub/.git/config &&
h=$(printf 'sub/.git/hooks/pre-commit\033]52;c;cHduZWQ=\007\nagentbox: audit: FORGED') &&
printf '#!/bin/sh\n./tool\n' > "$h" && chmod +x "$h" &&
printf '#!/bin/sh\n' > sub/tool && chmod +x sub/tool`

// TestAuditFindingsCarryNoTerminalControl: the audit's findings reach a Go API
// caller (Result.AuditFindings, "one line each") and its Log with no rune a terminal
// acts on and no line break, whatever the session named. On main the config's
// subsection reached Result.AuditFindings with its ESC, U+009B and U+202E as they
// were, and the hook's name put a line of its own making into the Log.
func TestAuditFindingsCarryNoTerminalControl(t *testing.T) {
	if !asTestUser(t) {
		return
	}
	for name, run := range launchers(t) {
		t.Run(name, func(t *testing.T) {
			repo := newRepo(t)
			var log strings.Builder
			res, err := run(Options{Command: []string{"/bin/sh", "-c", plantHostileNames, "sh", repo}, Repo: repo, Dir: repo, NoRecord: true, NoGitSave: true, Log: &log})
			if err != nil || res.Status != 0 {
				t.Fatalf("session: status %d, %v\n%s", res.Status, err, log.String())
			}
			if len(res.AuditFindings) < 3 {
				t.Fatalf("want the config, the hook and the program reported, got %q", res.AuditFindings)
			}
			for _, f := range res.AuditFindings {
				if !termsafe.Safe(f) {
					t.Errorf("Result.AuditFindings holds what a terminal acts on: %q", f)
				}
			}
			for _, l := range strings.Split(log.String(), "\n") {
				if strings.HasPrefix(l, "agentbox: audit: FORGED") || !termsafe.Safe(l) {
					t.Errorf("a line of the Log made by the session: %q\n%s", l, log.String())
				}
			}
		})
	}
}
