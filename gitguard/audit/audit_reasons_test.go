package audit

import (
	"fmt"
	"strings"
	"testing"
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
