package shadow

import (
	"bytes"
	"compress/zlib"
	"io"
	"strings"
	"testing"
)

// TestStoredZlib: the stored-block stream inflates to its parts with Go's zlib
// reader (which checks the Adler-32 sum), at the sizes around a block's bound.
func TestStoredZlib(t *testing.T) {
	for _, n := range []int{0, 1, 65534, 65535, 65536, 3*65535 + 7} {
		body := bytes.Repeat([]byte("agentbox"), n/8+1)[:n]
		hdr := []byte("blob " + strings.Repeat("9", n%5) + "\x00")
		z := storedZlib(hdr, body)
		r, err := zlib.NewReader(bytes.NewReader(z))
		if err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		got, err := io.ReadAll(r)
		if err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		if want := append(append([]byte(nil), hdr...), body...); !bytes.Equal(got, want) {
			t.Fatalf("%d bytes: inflated %d bytes, want %d", n, len(got), len(want))
		}
	}
}
