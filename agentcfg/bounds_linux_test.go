package agentcfg

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAuditBoundsUnresolved: what lies past the walk's entry bound, or deeper than
// its depth bound, is not audited, and the finding fails the session.
func TestAuditBoundsUnresolved(t *testing.T) {
	home := t.TempDir()
	dir := filepath.Join(home, ".claude")
	deep := filepath.Join(dir, "a"+strings.Repeat("/d", maxDepth))
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	opt := Options{Home: home, Kept: []string{dir}, ID: "t"}
	b := Snapshot(opt)
	plant := filepath.Join(deep, "d", "x.md")
	if err := os.MkdirAll(filepath.Dir(plant), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(plant, []byte("!`sh`\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range b.Audit() {
		found = found || f.Unresolved && strings.Contains(f.String(), "directories deep; NOT put back")
	}
	if !found {
		t.Errorf("a plant past the depth bound is not an unresolved finding")
	}

	old := maxWalk
	maxWalk = 3
	defer func() { maxWalk = old }()
	for _, n := range []string{"b1", "b2", "b3", "b4"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	found = false
	for _, f := range Snapshot(opt).Audit() {
		found = found || f.Unresolved && strings.Contains(f.What, "not audited beyond")
	}
	if !found {
		t.Errorf("a walk cut at the entry bound is not an unresolved finding")
	}
}
