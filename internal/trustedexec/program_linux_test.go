package trustedexec

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestProgram: the file opened is checked itself, on top of the walk: a file
// others may write, one that is not executable and a directory are refused; an
// executable file writable by its owner only is opened, through a link too.
func TestProgram(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		name string
		mode os.FileMode
		want string // substring of the refusal; "" accepted
	}{
		{"owner only", 0o755, ""},
		{"group-writable", 0o775, "writable by group (mode 0775)"},
		{"others-writable", 0o757, "writable by others (mode 0757)"},
		{"not executable", 0o644, "not executable"},
	} {
		p := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "-"))
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, tt.mode); err != nil {
			t.Fatal(err)
		}
		link := p + ".link"
		if err := os.Symlink(filepath.Base(p), link); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{p, link} {
			o, err := Program(name, "agentbox")
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("%s: %v, want it opened", name, err)
			case tt.want == "" && o.Real != p:
				t.Errorf("%s: opened %s, want %s", name, o.Real, p)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("%s: %v, want a refusal with %q", name, err, tt.want)
			}
			if o != nil {
				o.File.Close()
			}
		}
	}
	if _, err := Program(dir, "agentbox"); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a directory: %v, want a refusal", err)
	}
}
