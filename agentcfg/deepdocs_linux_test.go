package agentcfg

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestDeepDocumentsCountWhole: documents shaped for the decoder's or the walk's
// worst case — TOML inline tables or dotted keys nested past tomlbound's bound,
// many JSON keys deep down or below a long key — cannot be read key by key within
// their size's cost, so they count whole: the session's version is put back, the
// user's file is as it was, and the audit allocates in proportion to the file
// (before, each of these rows allocated gigabytes, or hundreds of times the
// file, and a kept 16 MiB file ran the host out of memory).
func TestDeepDocumentsCountWhole(t *testing.T) {
	wide := func(prefix, suffix string, keys int) string {
		var b strings.Builder
		b.WriteString(prefix + "{")
		for i := range keys {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, `"k%d":1`, i)
		}
		return b.String() + "}" + suffix
	}
	for _, c := range []struct{ name, rel, before, after string }{
		{"TOML inline tables", ".codex/config.toml", "model = \"o3\"\n",
			"notify = [\"touch\", \"/tmp/x\"]\nx = " + strings.Repeat("{b=", 4000) + "1" + strings.Repeat("}", 4000) + "\n"},
		{"TOML dotted key", ".codex/config.toml", "model = \"o3\"\n", strings.Repeat("a.", 8000) + "a = 1\n"},
		{"JSON settings wide below a long key", ".claude/settings.json", "{}\n", wide(`{"`+strings.Repeat("k", 4<<10)+`":`, "}", 50000)},
		{"JSON settings wide and deep", ".claude/settings.json", "{}\n", wide(strings.Repeat(`{"a":`, 200), strings.Repeat("}", 200), 100000)},
		{"JSON state wide and deep", ".claude.json", "{}\n", wide(strings.Repeat(`{"a":`, 200), strings.Repeat("}", 200), 100000)},
	} {
		t.Run(c.name, func(t *testing.T) {
			home := t.TempDir()
			path := filepath.Join(home, c.rel)
			os.MkdirAll(filepath.Dir(path), 0o755)
			put(t, path, c.before)
			kept := filepath.Join(home, strings.SplitN(c.rel, "/", 2)[0])
			base := Snapshot(Options{Home: home, Kept: []string{kept}, Repo: auditRepo, ID: "T", Quarantine: t.TempDir()})
			put(t, path, c.after)
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			fs := base.Audit()
			runtime.ReadMemStats(&m1)
			if alloc, bound := m1.TotalAlloc-m0.TotalAlloc, uint64(32*len(c.after)+16<<20); alloc > bound {
				t.Errorf("the audit of a %d-byte file allocated %d MiB (bound %d MiB)", len(c.after), alloc>>20, bound>>20)
			}
			if len(fs) == 0 {
				t.Errorf("no finding for a document that cannot be walked in its size's cost")
			}
			if got := get(path); got != c.before {
				t.Errorf("after the audit: %.100q, want the user's %q", got, c.before)
			}
		})
	}
}

// TestManyKeysOneFinding: a settings file of many new keys is one finding and is
// put back whole; key by key, 15 MiB of them made 1.3 million lines (250 MB) on
// the operator's terminal and in the session's record.
func TestManyKeysOneFinding(t *testing.T) {
	var b strings.Builder
	b.WriteString("{")
	for i := range 100000 {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"k%d":1`, i)
	}
	b.WriteString("}")
	home := t.TempDir()
	path := filepath.Join(home, ".claude", "settings.json")
	os.MkdirAll(filepath.Dir(path), 0o755)
	put(t, path, "{}\n")
	base := Snapshot(Options{Home: home, Kept: []string{filepath.Join(home, ".claude")}, Repo: auditRepo, ID: "T", Quarantine: t.TempDir()})
	put(t, path, b.String())
	fs := base.Audit()
	if len(fs) != 1 || len(fs[0].String()) > 1000 {
		n := 0
		for _, f := range fs {
			n += len(f.String())
		}
		t.Errorf("%d findings (%d bytes) for one file of 100,000 new keys, want one line", len(fs), n)
	}
	if got := get(path); got != "{}\n" {
		t.Errorf("after the audit: %.100q, want the user's", got)
	}
}
