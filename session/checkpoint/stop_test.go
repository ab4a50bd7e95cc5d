package checkpoint

import (
	"os"
	"path/filepath"
	"testing"
)

// TestStopLeavesNothing: once Removed returns, the socket, its directory and the
// claim beside it are gone, also when something other than the socket is found in
// the directory; Removed stops an endpoint not yet stopped.
func TestStopLeavesNothing(t *testing.T) {
	for _, extra := range []string{"", "file", "dir"} {
		s, err := Start(func(string, int64) (Result, error) { return Result{}, nil })
		if err != nil {
			t.Fatal(err)
		}
		switch extra {
		case "file":
			if err := os.WriteFile(filepath.Join(s.dir, "planted"), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		case "dir":
			if err := os.MkdirAll(filepath.Join(s.dir, "d", "e"), 0o700); err != nil {
				t.Fatal(err)
			}
		}
		if extra == "" {
			s.Stop()
		}
		s.Removed()
		for _, p := range []string{s.sock, s.dir, s.dir + ".lock"} {
			if _, err := os.Lstat(p); !os.IsNotExist(err) {
				t.Errorf("with %q in it: %s left after Stop (%v)", extra, p, err)
			}
		}
		s.Stop() // a second call does nothing
		s.Removed()
	}
}
