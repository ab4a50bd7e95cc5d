package safepath

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestOpenRegularFollow: a link to a regular file is read; a FIFO, a link to one,
// a link to a device or to a directory is ErrNotRegular, without blocking and
// without what the path leads to ever being opened (a watchdog is armed by its
// open): the FIFO sees no open.
func TestOpenRegularFollow(t *testing.T) {
	dir := t.TempDir()
	file, fifo := filepath.Join(dir, "file"), filepath.Join(dir, "fifo")
	if err := os.WriteFile(file, []byte("content"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"tofile": file, "tofifo": fifo, "tozero": "/dev/zero", "todir": dir} {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"file", "tofile"} {
		f, err := OpenRegularFollow(filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		b, err := io.ReadAll(f)
		f.Close()
		if err != nil || string(b) != "content" {
			t.Errorf("%s: read %q, %v", name, b, err)
		}
	}
	for _, name := range []string{"fifo", "tofifo", "tozero", "todir"} {
		var err error
		opened := testenv.Opened(t, fifo, func() {
			var f *os.File
			if f, err = OpenRegularFollow(filepath.Join(dir, name)); err == nil {
				f.Close()
			}
		})
		if !errors.Is(err, ErrNotRegular) {
			t.Errorf("%s: %v, want ErrNotRegular", name, err)
		}
		if opened {
			t.Errorf("%s: the FIFO was opened before it was judged", name)
		}
	}
	if _, err := OpenRegularFollow(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing: %v, want ErrNotExist", err)
	}
}
