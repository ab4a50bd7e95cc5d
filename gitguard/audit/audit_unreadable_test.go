package audit

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUnresolvedFindings: a place the audit could neither see into nor move (the
// rest of a tree past the entry bound) and an item it could not move are
// unresolved, which fails a session; a moved item, an item that was no longer
// there and a path that vanished are not.
func TestUnresolvedFindings(t *testing.T) {
	f := newFixture(t)
	for i := range 40 {
		f.Write(fmt.Sprintf("d%02d/f", i), "x\n", 0o644)
	}
	s, err := Scan(f.Repo, ScanOptions{Home: f.Home, MaxEntries: 20})
	if err != nil {
		t.Fatal(err)
	}
	var stopped *Finding
	fs := Compare(nil, s)
	for i := range fs {
		if strings.Contains(fs[i].String(), "walk stopped") {
			stopped = &fs[i]
		}
	}
	if stopped == nil || !stopped.Unresolved() || stopped.Kind != "" {
		t.Fatalf("the entry bound's finding: %+v (all: %v)", stopped, fs)
	}
	if !strings.Contains(stopped.String(), "agentbox audit") {
		t.Errorf("the line does not say what to do: %s", stopped)
	}
	gone := []Finding{{Path: filepath.Join(f.Repo, "gone"), Kind: KindUnaudited}}
	Quarantine(gone, "X")
	if gone[0].Unresolved() {
		t.Errorf("a path no longer there, unresolved: %v", gone[0])
	}
	for _, c := range []struct {
		f    Finding
		want bool
	}{
		{Finding{Path: "/r/a", Kind: KindConfig, Moved: "/q/a"}, false},
		{Finding{Path: "/r/a", Kind: KindConfig, MoveErr: os.ErrPermission}, true},
		{Finding{Path: "/r/a", Kind: KindConfig, MoveErr: fmt.Errorf("open /r: %w", os.ErrNotExist)}, false},
		{skipFinding(Skip{Path: "/r/a", Reason: "gone"}, place{}), false},
		{skipFinding(Skip{Path: "/r/a", Reason: "deep", Blind: true}, place{}), true}, // until moved
		{Finding{Path: "/r/a", Kind: KindUnaudited, Moved: "/q/a", place: place{roots: []string{"/r"}}}, false},
		{Finding{Path: "/r/a", Kind: KindUnaudited, Moved: "/r/a.agentbox-quarantine-X", place: place{roots: []string{"/r"}}}, true},
	} {
		if got := c.f.Unresolved(); got != c.want {
			t.Errorf("%s: Unresolved %v, want %v", c.f, got, c.want)
		}
	}
}
