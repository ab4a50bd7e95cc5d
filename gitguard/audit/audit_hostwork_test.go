package audit

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestAuditBlockers: a FIFO planted after the baseline where Git opens a file by
// name is a finding, moved aside; one elsewhere (Git never opens it by name) is not.
func TestAuditBlockers(t *testing.T) {
	for _, rel := range []string{".gitignore", "sub/.gitattributes", "sub/.gitmodules", ".mailmap",
		"nest/.git", ".git/index", ".git/packed-refs", ".git/info/exclude", ".git/refs/heads/main",
		"bare/HEAD", "bare/objects/info/alternates"} {
		t.Run(rel, func(t *testing.T) {
			f := newFixture(t)
			f.GitdirAt("bare")
			f.Write("sub/f", "x\n", 0o644)
			base := f.scan()
			p := filepath.Join(f.Repo, rel)
			os.MkdirAll(filepath.Dir(p), 0o755)
			os.Remove(p)
			if err := syscall.Mkfifo(p, 0o644); err != nil {
				t.Fatal(err)
			}
			fs := Compare(base, f.scan())
			fd := findingAt(fs, p)
			if fd == nil || fd.Kind != KindBlocker || !strings.Contains(strings.Join(fd.Reasons, ";"), "a FIFO where Git opens") {
				t.Fatalf("no blocker finding for %s: %v", p, fs)
			}
			root := t.TempDir()
			QuarantineTo(fs, "ID", root)
			if _, err := os.Lstat(p); err == nil {
				t.Errorf("%s still in place", p)
			}
			if fi, err := os.Lstat(filepath.Join(root, "ID", p)); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
				t.Errorf("not in the quarantine: %v", err)
			}
		})
	}
	f := newFixture(t)
	base := f.scan()
	p := filepath.Join(f.Repo, "ordinary-fifo")
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Fatal(err)
	}
	if fs := Compare(base, f.scan()); len(fs) != 0 {
		t.Errorf("a FIFO Git never opens by name is a finding: %v", fs)
	}
}

// TestQuarantineToAcrossFilesystems: the quarantine on another filesystem than the
// repository (a tmpfs): files, symlinks and FIFOs are copied out and removed.
func TestQuarantineToAcrossFilesystems(t *testing.T) {
	root, err := os.MkdirTemp("/dev/shm", "agentbox-quarantine-test-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(root)
	f := newFixture(t)
	var a, b syscall.Stat_t
	if syscall.Stat(root, &a) != nil || syscall.Stat(f.Repo, &b) != nil || a.Dev == b.Dev {
		t.Fatalf("/dev/shm and %s are one filesystem here: the test needs two", f.Repo)
	}
	cfg := f.Write("nest/.git/config", payload, 0o644)
	hook := f.Write("nest/.git/hooks/pre-commit", "#!/bin/sh\n", 0o755)
	link := filepath.Join(f.Repo, "nest/.git/hooks/post-commit")
	if err := os.Symlink("/bin/true", link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(f.Repo, ".gitignore")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	fs := []Finding{{Path: cfg, Kind: KindConfig}, {Path: hook, Kind: KindHook}, {Path: link, Kind: KindHook}, {Path: fifo, Kind: KindBlocker}}
	QuarantineTo(fs, "X", root)
	for _, fd := range fs {
		if fd.MoveErr != nil || fd.Moved != filepath.Join(root, "X", fd.Path) {
			t.Errorf("%s: moved to %q, err %v", fd.Path, fd.Moved, fd.MoveErr)
		}
		if _, err := os.Lstat(fd.Path); err == nil {
			t.Errorf("%s still in place", fd.Path)
		}
	}
	if b, err := os.ReadFile(filepath.Join(root, "X", cfg)); err != nil || string(b) != payload {
		t.Errorf("quarantined config: %q, %v", b, err)
	}
	if l, err := os.Readlink(filepath.Join(root, "X", link)); err != nil || l != "/bin/true" {
		t.Errorf("quarantined symlink: %q, %v", l, err)
	}
}
