package audit

import (
	"fmt"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/termsafe"
)

// TestFindingLineBounded: a finding with a million reasons (a config of as many
// dangerous entries) prints one line of a few kilobytes, naming how many it left
// out and keeping the last reason, which says what --fix did.
func TestFindingLineBounded(t *testing.T) {
	f := Finding{Path: "/r/sub/.git/config", Kind: KindConfig}
	for i := range 1000000 {
		f.Reasons = append(f.Reasons, fmt.Sprintf(`alias.x%d = "!true" (alias runs a shell command)`, i))
	}
	f.Reasons = append(f.Reasons, "these entries removed from the file; the rest of it kept")
	s := f.String()
	if len(s) > 4096 || !strings.Contains(s, "… and 999984 more") || !strings.HasSuffix(s, "the rest of it kept") || !strings.Contains(s, "alias.x15 ") {
		t.Errorf("finding line of %d bytes: %.600s", len(s), s)
	}
	few := Finding{Path: "/r/.git/config", Kind: KindConfig, Reasons: []string{"a", "b"}}
	if got := few.String(); got != "/r/.git/config (config): a; b" {
		t.Errorf("a short finding: %q", got)
	}
}

// hostileName holds what a terminal acts on: an OSC 52 clipboard write (ESC … BEL),
// an 8-bit CSI (U+009B), a right-to-left override, and a newline followed by a line
// made to look like agentbox's own.
const hostileName = "x\x1b]52;c;cHduZWQ=\a\u009b31m\u202e\nagentbox: audit: FORGED"

// TestFindingLineCarriesNoTerminalControl: every finding's line is one line with no
// rune a terminal acts on, whatever the session named — a config subsection (which
// Git lets hold any byte but newline and NUL) and a hook's file name reach the
// reasons through the entry's name and the "program run by" watch. The line goes to
// the Go API's Result.AuditFindings and `agentbox audit`'s pending audits as it is,
// and through a writer that keeps newlines to agentbox exec's stderr: on main the
// ESC and U+009B reached the Go API's caller and the newline forged a line of
// agentbox's own on exec's stderr.
func TestFindingLineCarriesNoTerminalControl(t *testing.T) {
	f := newFixture(t)
	base := f.scan()
	f.GitdirAt("sub/.git")
	sub := strings.ReplaceAll(strings.ReplaceAll(hostileName, "\n", ""), `"`, "")
	f.Write("sub/.git/config", "[filter \""+sub+"\"]\n\tclean = ./tool\n", 0o644)
	f.Write("sub/.git/hooks/"+strings.ReplaceAll(hostileName, "/", ""), "#!/bin/sh\n./tool\n", 0o755)
	f.Write("sub/tool", "#!/bin/sh\n", 0o755)
	fs := Compare(base, f.scan())
	if len(fs) < 3 {
		t.Fatalf("want the config, the hook and the program each reported, got %v", fs)
	}
	for _, fd := range fs {
		if s := fd.String(); !termsafe.Safe(s) {
			t.Errorf("a finding's line holds what a terminal acts on: %q", s)
		}
	}
	// A reason that names an error (a path the session chose) is kept on one line too.
	e := Finding{Path: "/r/a", Reasons: []string{"not audited: cannot open directory: open /r/" + hostileName + ": permission denied"}}
	if s := e.String(); !termsafe.Safe(s) || !strings.Contains(s, `\nagentbox: audit: FORGED`) {
		t.Errorf("an error's reason: %q, want it escaped on one line", s)
	}
}
