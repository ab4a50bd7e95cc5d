package sshagent

import (
	"crypto/ed25519"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestKeyFileNotRegular: a --ssh-key path is read at every launch, and may lie
// where an earlier session wrote (a kept ~/.ssh, the repository). A FIFO planted
// there hung the launch for good, and a link to a device had the launcher open the
// device (a watchdog is armed by the open; the operator's terminal is read). Each
// is refused at once now, naming why, while a link to a real public key file (as
// dotfile managers make) still works.
func TestKeyFileNotRegular(t *testing.T) {
	dir := t.TempDir()
	pub, _, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	blob := edBlob(pub)
	real := filepath.Join(dir, "real.pub")
	if err := os.WriteFile(real, []byte("ssh-ed25519 "+base64.StdEncoding.EncodeToString(blob)+" me\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo.pub")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	links := map[string]string{"linked.pub": real, "tofifo.pub": fifo, "tozero.pub": "/dev/zero", "totty.pub": "/dev/tty", "todir.pub": dir}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	parse := func(path string) (Selector, error) {
		type result struct {
			s   Selector
			err error
		}
		done := make(chan result, 1)
		go func() { s, err := ParseSelector(path); done <- result{s, err} }()
		select {
		case r := <-done:
			return r.s, r.err
		case <-time.After(time.Minute):
			t.Fatalf("ParseSelector(%s) still blocked after a minute", path)
			return Selector{}, nil
		}
	}
	for _, name := range []string{"real.pub", "linked.pub"} {
		s, err := parse(filepath.Join(dir, name))
		if err != nil || s.fp != Fingerprint(blob) {
			t.Errorf("%s: %v, fingerprint %q, want %q", name, err, s.fp, Fingerprint(blob))
		}
	}
	for _, name := range []string{"fifo.pub", "tofifo.pub", "tozero.pub", "totty.pub", "todir.pub"} {
		_, err := parse(filepath.Join(dir, name))
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("%s: %v, want a refusal saying it is not a regular file", name, err)
		}
	}
}
