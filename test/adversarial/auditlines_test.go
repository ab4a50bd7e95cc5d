package adversarial

import (
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/termsafe"
	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
)

// plantHostileNames makes a nested repository whose config names a filter by a
// subsection holding an OSC 52 clipboard write (ESC ] 52 … BEL), an 8-bit CSI
// (U+009B) and a right-to-left override, and whose hook's file name holds an escape
// sequence and a newline followed by a line made to look like agentbox's own; the
// hook and the filter run ./tool. Each is a finding of the audit, and each finding's
// line names what the session chose.
const plantHostileNames = `git init -q sub &&
printf '[filter "x\033]52;c;cHduZWQ=\007\302\233\342\200\256"]\n\tclean = ./tool\n' > sub/.git/config &&
h=$(printf 'sub/.git/hooks/pre-commit\033]52;c;cHduZWQ=\007\nagentbox: audit: FORGED') &&
printf '#!/bin/sh\n./tool\n' > "$h" && chmod +x "$h" &&
printf '#!/bin/sh\n' > sub/tool && chmod +x sub/tool`

// TestAuditLinesOnTerminal: the audit's lines reach the operator's terminal with no
// rune a terminal acts on and no line the session wrote, whether the session's own
// end audit prints them (exec), the next launch runs the audit a killed launcher
// left pending (exec after a kill), or `agentbox audit` does. On main, `agentbox
// audit` printed the killed session's findings raw (its pending audit's writer was
// os.Stderr itself): the OSC 52 sequence wrote the operator's clipboard, U+009B and
// U+202E reached the terminal; and every runner's exec printed the hook's newline as
// it was, a forged "agentbox: audit: FORGED" line of its own.
func TestAuditLinesOnTerminal(t *testing.T) {
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend+"/exec", func(t *testing.T) {
			x := newTarget(t, backend)
			r := sandboxtest.Run(x.Command(x.Repo, []string{"--no-git-save", "--no-record"}, plantHostileNames))
			auditLinesSafe(t, r)
		})
		for _, next := range []string{"exec", "audit"} {
			t.Run(backend+"/killed/"+next, func(t *testing.T) {
				x := newTarget(t, backend)
				killLauncherMidSession(t, x, plantHostileNames)
				var r sandboxtest.Result
				if next == "exec" {
					r = sandboxtest.Run(x.Command(x.Repo, []string{"--no-git-save", "--no-record"}, "true"))
				} else {
					r = sandboxtest.Run(x.Agentbox(x.Repo, "audit", "--repo", x.Repo))
				}
				if !strings.Contains(r.Stderr, "was killed before its audit; audited now: 3 finding(s)") {
					t.Errorf("agentbox %s after a killed launcher: the missed audit did not find the three plants:\n%s", next, r)
				}
				auditLinesSafe(t, r)
			})
		}
	}
}

// auditLinesSafe fails unless r's output reported the plants, each line free of
// what a terminal acts on, and none of them the session's forged one.
func auditLinesSafe(t *testing.T, r sandboxtest.Result) {
	t.Helper()
	if !strings.Contains(r.Stderr, "sub/tool (program)") {
		t.Errorf("the audit did not report the program the plants run:\n%s", r)
	}
	for _, out := range []string{r.Stdout, r.Stderr} {
		for _, l := range strings.Split(out, "\n") {
			if !termsafe.Safe(l) || strings.HasPrefix(l, "agentbox: audit: FORGED") {
				t.Errorf("a line the session made reached the terminal: %q\n%s", l, r)
			}
		}
	}
}
