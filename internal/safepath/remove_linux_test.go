package safepath

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestRemoveAllHostileTree: what a sandbox can leave in its --disk-tmp /tmp is
// removed, and nothing a symlink in it points at is touched.
func TestRemoveAllHostileTree(t *testing.T) {
	if !testenv.AsTestUser(t) { // root would remove what a user cannot
		return
	}
	base := t.TempDir()
	outside := filepath.Join(base, "outside")
	if err := os.MkdirAll(filepath.Join(outside, "keep"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "keep", "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(base, "tree")
	for _, d := range []string{"locked/inner", "noexec/inner", "readonly/inner", "fifo"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, d, "file"), []byte("x"), 0o000); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(root, "fifo", "pipe"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "link-dir")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "keep"), filepath.Join(root, "locked", "link")); err != nil {
		t.Fatal(err)
	}
	if l, err := bindSocket(filepath.Join(root, "sock")); err == nil {
		defer unix.Close(l)
	}
	// Deeper than PATH_MAX and than flattenDepth, made with *at calls.
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("d", 200)
	for i := 0; i < 300; i++ {
		if err := unix.Mkdirat(fd, long, 0o700); err != nil {
			t.Fatal(err)
		}
		next, err := unix.Openat(fd, long, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd = next
	}
	if err := unix.Mkdirat(fd, "bottom", 0o000); err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	// In this order: once "locked" is mode 000, nothing below it can be changed.
	for _, c := range []struct {
		dir  string
		mode os.FileMode
	}{{"locked/inner", 0}, {"locked", 0}, {"noexec", 0o600}, {"readonly", 0o500}, {"fifo", 0o300}} {
		if err := os.Chmod(filepath.Join(root, c.dir), c.mode); err != nil {
			t.Fatal(err)
		}
	}
	// What the launcher and gc used: it gives up on the first mode-000 directory.
	if err := os.RemoveAll(root); err == nil {
		t.Fatal("os.RemoveAll removed the tree: it is not hostile enough to test anything")
	}

	if err := RemoveAll(root); err != nil {
		t.Fatalf("RemoveAll: %v", err)
	}
	if _, err := os.Lstat(root); !os.IsNotExist(err) {
		t.Fatalf("tree still there: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(outside, "keep", "f")); err != nil || string(b) != "x" {
		t.Fatalf("a symlink's target was touched: %q %v", b, err)
	}
	if fi, err := os.Stat(filepath.Join(outside, "keep")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("a symlink's target changed mode: %v %v", fi, err)
	}
	if err := RemoveAll(root); err != nil {
		t.Errorf("RemoveAll of a missing path: %v", err)
	}
	file := filepath.Join(base, "plain")
	if err := os.WriteFile(file, nil, 0); err != nil {
		t.Fatal(err)
	}
	if err := RemoveAll(file); err != nil || exists(file) {
		t.Errorf("RemoveAll(file): %v", err)
	}
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

// bindSocket binds a unix socket at path (a socket node in the tree).
func bindSocket(path string) (int, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.Cleanup()
	os.Exit(code)
}
