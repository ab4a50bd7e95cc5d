package program

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/safepath"
)

// The compiled plan skips a device node by skipDevNode: only /dev/tty, and only when
// the host has none. The errors are the ones the compiler really gets for a missing
// node (its lstat), and the one a symlink-refusing open gets.
func TestSkipDevNode(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "tty")
	_, captureErr := safepath.Open(missing, unix.O_PATH)
	_, lstatErr := os.Lstat(missing)
	if captureErr == nil || lstatErr == nil {
		t.Fatalf("missing node: open %v, lstat %v", captureErr, lstatErr)
	}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"tty", captureErr, true}, // an open of a host without /dev/tty
		{"tty", lstatErr, true},   // the compiler's look at it
		{"tty", nil, false},       // present: bound like every node
		{"tty", &MountError{Op: "open", Source: "/dev/tty", Err: unix.ELOOP}, false}, // a symlink: refused, not skipped
		{"tty", &MountError{Op: "open_tree", Source: "/dev/tty", Err: unix.ENOSYS}, false},
		{"null", captureErr, false}, // every other node is required
		{"urandom", lstatErr, false},
	}
	for _, tt := range tests {
		if got := skipDevNode(tt.name, tt.err); got != tt.want {
			t.Errorf("skipDevNode(%q, %v) = %v, want %v", tt.name, tt.err, got, tt.want)
		}
	}
}
