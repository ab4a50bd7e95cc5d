package prepare

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/backend"
)

// TestGuardStdioKinds: a file is relayed through a pipe with its bytes intact, both ways;
// a pipe and /dev/null pass as they are; a directory is refused.
func TestGuardStdioKinds(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in")
	if err := os.WriteFile(in, []byte("input bytes\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	inF, err := os.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer inF.Close()
	outF, err := os.Create(filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer outF.Close()

	s, r, err := GuardStdio(backend.Stdio{Stdin: inF, Stdout: outF, Stderr: outF})
	if err != nil {
		t.Fatal(err)
	}
	if s.Stdin == inF || s.Stdout == outF || s.Stderr != s.Stdout {
		t.Fatalf("streams not relayed (stderr the same file: one pipe): %+v", s)
	}
	got, err := io.ReadAll(s.Stdin)
	if err != nil || string(got) != "input bytes\n" {
		t.Errorf("relayed input: %q, %v", got, err)
	}
	if _, err := io.WriteString(s.Stdout, "output bytes\n"); err != nil {
		t.Fatal(err)
	}
	s.Stdout.Close() // the command's copy
	r.Stop()
	if b, _ := os.ReadFile(outF.Name()); string(b) != "output bytes\n" {
		t.Errorf("relayed output: %q", b)
	}

	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	s, r, err = GuardStdio(backend.Stdio{Stdin: pr, Stdout: pw, Stderr: null})
	if err != nil {
		t.Fatal(err)
	}
	r.Stop()
	if s.Stdin != pr || s.Stdout != pw || s.Stderr != null {
		t.Errorf("a pipe or /dev/null was relayed: %+v", s)
	}

	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, _, err := GuardStdio(backend.Stdio{Stdout: d}); err == nil || !strings.Contains(err.Error(), "standard output is a directory") {
		t.Errorf("a directory as standard output: %v, want refused", err)
	}
}
