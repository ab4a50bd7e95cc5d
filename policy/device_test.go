package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckDevice: only a character device below /dev, not one the sandbox has
// already, is accepted; a symlink leads to its node, which is what is handed in.
func TestCheckDevice(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "l")
	if err := os.Symlink("/dev/console", link); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ arg, want, err string }{
		{arg: "/dev/console", want: "/dev/console"},
		{arg: link, want: "/dev/console"},
		{arg: "/dev/../dev/console", want: "/dev/console"},
		{arg: "l", want: "/dev/console"}, // relative to the working directory
		{arg: file, err: "is not a character device"},
		{arg: "/dev", err: "is not a character device"},
		{arg: "/dev/no-such-node", err: "does not exist"},
		{arg: "/dev/null", err: "already"},
		{arg: "/dev/ptmx", err: "already"},
		{arg: "", err: "is not a path"},
		{arg: "/dev/x\x00", err: "is not a path"},
	} {
		got, err := checkDevice(c.arg, dir)
		switch {
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("%q: %q, %v; want %q", c.arg, got, err, c.want)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%q: %q, %v; want an error saying %q", c.arg, got, err, c.err)
		}
	}
	for _, d := range []string{"/dev/loop0", "/dev/vda", "/dev/sda", "/dev/zram0"} {
		if fi, err := os.Stat(d); err == nil && fi.Mode()&os.ModeCharDevice == 0 {
			if _, err := checkDevice(d, dir); err == nil || !strings.Contains(err.Error(), "block device") {
				t.Errorf("block device %s: %v, want it refused", d, err)
			}
		}
	}
}

// TestGPUNodes: whatever the host has, --gpu lists character devices only.
func TestGPUNodes(t *testing.T) {
	for _, n := range GPUNodes() {
		fi, err := os.Lstat(n)
		if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
			t.Errorf("GPUNodes lists %s, not a character device (%v)", n, err)
		}
	}
}
