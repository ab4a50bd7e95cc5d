package agentcfg

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// outLinkHome makes a HOME with a plain kept directory .tool (the user's own links
// in it: one out to their dotfiles, one inside, one relative that stays inside
// only at its depth) and a kept .config that holds fish's start-up file.
func outLinkHome(t *testing.T) (home string, opt func(id string) Options) {
	t.Helper()
	home, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	q := t.TempDir()
	for _, d := range []string{".tool/a/b", ".tool/v1/bin", ".config/fish", "dotfiles/nvim", ".ssh"} {
		if err := os.MkdirAll(filepath.Join(home, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	put(t, filepath.Join(home, ".tool/inside"), "x")
	put(t, filepath.Join(home, ".bashrc"), "# rc\n")
	put(t, filepath.Join(home, ".config/fish/config.fish"), "# fish\n")
	link(t, "../dotfiles/nvim", filepath.Join(home, ".tool/own"))
	link(t, "../../inside", filepath.Join(home, ".tool/a/b/up"))
	link(t, "v1/bin", filepath.Join(home, ".tool/cur"))
	return home, func(id string) Options {
		return Options{Home: home, Kept: []string{filepath.Join(home, ".tool"), filepath.Join(home, ".config")}, ID: id, Quarantine: q}
	}
}

func link(t *testing.T, target, at string) {
	t.Helper()
	if err := os.Symlink(target, at); err != nil {
		t.Fatal(err)
	}
}

// plantOutLinks is a session's work in outLinkHome's kept directories; it returns
// the links that must be gone after the audit (relative to HOME).
func plantOutLinks(t *testing.T, home string) []string {
	t.Helper()
	k := filepath.Join(home, ".tool")
	link(t, filepath.Join(home, ".bashrc"), filepath.Join(k, "bashrc"))   // a file of the user's
	link(t, home, filepath.Join(k, "src"))                                // a directory above the kept one
	link(t, "../.config/autostart/x.desktop", filepath.Join(k, "dangle")) // dangling, created by an open
	link(t, "inside", filepath.Join(k, "in"))                             // stays inside: kept
	link(t, "missing/../../../.profile", filepath.Join(k, "dotdot"))      // ".." below a missing directory
	link(t, "fish/config.fish", filepath.Join(home, ".config/log"))       // into the kept .config, at a start-up file
	link(t, "l2", filepath.Join(k, "l1"))
	link(t, "l1", filepath.Join(k, "l2"))
	link(t, "a", filepath.Join(k, "ina"))                 // stays inside: kept
	link(t, "ina/../../.bashrc", filepath.Join(k, "via")) // out, through a link of the session's that stays inside
	// The user's link retargeted; their relative link moved up, where it leads out.
	os.Remove(filepath.Join(k, "own"))
	link(t, filepath.Join(home, ".ssh"), filepath.Join(k, "own"))
	if err := os.Rename(filepath.Join(k, "a/b"), filepath.Join(k, "b")); err != nil {
		t.Fatal(err)
	}
	// A directory the user's link goes through, replaced by a link out: that link
	// goes, the user's stays.
	if err := os.RemoveAll(filepath.Join(k, "v1")); err != nil {
		t.Fatal(err)
	}
	link(t, home, filepath.Join(k, "v1"))
	return []string{".tool/bashrc", ".tool/src", ".tool/dangle", ".tool/dotdot", ".config/log", ".tool/l1", ".tool/l2",
		".tool/via", ".tool/own", ".tool/b/up", ".tool/v1"}
}

func checkOutLinks(t *testing.T, home string, gone []string, fs []Finding) {
	t.Helper()
	var got []string
	for _, f := range fs {
		got = append(got, strings.TrimPrefix(f.Path, home+"/"))
		if f.Unresolved || f.MovedTo == "" {
			t.Errorf("not moved to the quarantine: %v", f)
		}
	}
	sort.Strings(got)
	sort.Strings(gone)
	if strings.Join(got, " ") != strings.Join(gone, " ") {
		t.Errorf("findings %v, want %v", got, gone)
	}
	for _, rel := range gone {
		if l, err := os.Readlink(filepath.Join(home, rel)); err == nil && rel != ".tool/own" {
			t.Errorf("%s -> %s left", rel, l)
		}
	}
	for rel, want := range map[string]string{".tool/own": "../dotfiles/nvim", ".tool/in": "inside", ".tool/ina": "a", ".tool/cur": "v1/bin"} {
		if l, err := os.Readlink(filepath.Join(home, rel)); err != nil || l != want {
			t.Errorf("%s -> %q (%v), want the link to %s", rel, l, err, want)
		}
	}
}

// TestAuditOutLinks: in a kept directory that is no agent's, a symlink the session
// leaves that leads out of it (or at a start-up file in it) is moved to the
// quarantine; the user's own links stay, a retargeted one is put back, and a link
// that stays inside is the session's to leave.
func TestAuditOutLinks(t *testing.T) {
	home, opt := outLinkHome(t)
	base := Snapshot(opt("T"))
	gone := plantOutLinks(t, home)
	checkOutLinks(t, home, gone, base.Audit())
	if fs := Snapshot(opt("U")).Audit(); len(fs) != 0 {
		t.Errorf("a second audit found %v", fs)
	}
}

// TestLedgerOutLinks: the same through the ledger, for a killed launcher's session
// (the next launch audits it) while another session that began after the plants
// keeps the same directory: its baseline is the ledger's, not the plants.
func TestLedgerOutLinks(t *testing.T) {
	home, opt := outLinkHome(t)
	state := t.TempDir()
	a, _, err := Begin(state, opt("A"))
	if err != nil {
		t.Fatal(err)
	}
	gone := plantOutLinks(t, home)
	b, _, err := Begin(state, opt("B"))
	if err != nil {
		t.Fatal(err)
	}
	a.live.Close() // A's launcher dies
	_, orphans, err := Begin(state, opt("C"))
	if err != nil {
		t.Fatal(err)
	}
	if len(orphans) != 1 {
		t.Fatalf("orphans %v, want A's", orphans)
	}
	checkOutLinks(t, home, gone, orphans[0].Findings)
	link(t, home, filepath.Join(home, ".tool/src")) // B's plant
	if fs := b.Finish(); len(fs) != 1 || fs[0].Path != filepath.Join(home, ".tool/src") {
		t.Errorf("B's audit: %v", fs)
	}
}

// TestResolveLink: where an open through a link lands, as the kernel resolves it.
func TestResolveLink(t *testing.T) {
	d, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(d, "k/real"), 0o755)
	put(t, filepath.Join(d, "k/file"), "x")
	link(t, d, filepath.Join(d, "k/up"))
	for _, c := range []struct {
		target, want string // want "" for "cannot be told"
	}{
		{"real", d + "/k/real"},
		{"up/k/real", d + "/k/real"},
		{"up/../x", filepath.Dir(d) + "/x"}, // ".." after a link: from where it leads, not lexically
		{"missing/new", d + "/k/missing/new"},
		{"missing/../../x", ""},
		{"file/x", ""},
		{"/nonexistent-agentbox/x", "/nonexistent-agentbox/x"},
	} {
		p := filepath.Join(d, "k/l")
		os.Remove(p)
		link(t, c.target, p)
		got, _, ok := resolveLink(p)
		if !ok {
			got = ""
		}
		if got != c.want {
			t.Errorf("-> %s: %q, want %q", c.target, got, c.want)
		}
	}
}
