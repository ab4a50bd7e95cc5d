package prepare

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/policy"
)

// TestGitConfigCopiesHostileFiles: a protected file that is a FIFO, larger than the
// bound, or not Git config gets an empty copy (fail closed, one line, the launcher
// not blocked on the FIFO); a pointer file (.git, commondir, gitdir) and a config
// without a credential get none; nothing is written before writeGitConfigCopies,
// which writes 0600 files named by their content's hash, and again over them.
func TestGitConfigCopiesHostileFiles(t *testing.T) {
	dir, cache := t.TempDir(), t.TempDir()
	token := "ghs_" + strings.Repeat("Z", 36)
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	huge := write("huge", strings.Repeat("#", 16<<20)+"\n[http]\n\textraheader = AUTHORIZATION: basic "+token+"\n")
	bad := write("bad", "[http]\n\textraheader = AUTHORIZATION: basic "+token+"\n[bad\n")
	plain := write("plain", "[core]\n\tbare = false\n")
	pointer := write("commondir", "../..\n")
	prot := []mounts.Protected{{Path: fifo, Exists: true}, {Path: huge, Exists: true}, {Path: bad, Exists: true},
		{Path: plain, Exists: true}, {Path: pointer, Exists: true}, {Path: dir, Dir: true, Exists: true}}
	p := &policy.Policy{Repo: dir, CacheDir: cache, GitConfigCopies: true}
	out, copies, notes := gitConfigCopies(p, prot)
	if len(out) != len(prot) || len(copies) != 3 || len(notes) != 3 {
		t.Fatalf("protected %+v\ncopies %d, notes %q", out, len(copies), notes)
	}
	for i, want := range []bool{true, true, true, false, false, false} {
		if (out[i].Copy != "") != want {
			t.Errorf("%s: copy %q", out[i].Path, out[i].Copy)
		}
	}
	for _, n := range notes {
		if !strings.Contains(n, "is empty inside") || strings.Contains(n, token) {
			t.Errorf("line %q", n)
		}
	}
	if _, err := os.Stat(filepath.Join(cache, "gitconfig")); !os.IsNotExist(err) {
		t.Errorf("a copy was written before writeGitConfigCopies: %v", err)
	}
	for range 2 {
		if err := writeGitConfigCopies(cache, copies); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range copies {
		fi, err := os.Lstat(c.path)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v", c.path, fi, err)
		}
		b, _ := os.ReadFile(c.path)
		if strings.Contains(string(b), token) || strings.Contains(string(b), "[") {
			t.Errorf("%s holds settings:\n%s", c.path, b)
		}
	}
	ents, _ := os.ReadDir(filepath.Join(cache, "gitconfig"))
	if len(ents) != 1 { // three empty copies, one content, one name; no temporary left
		t.Errorf("the cache holds %d files", len(ents))
	}
	p.GitConfigCopies = false
	if _, copies, _ := gitConfigCopies(p, prot); copies != nil {
		t.Error("copies without --hide-secrets")
	}
}
