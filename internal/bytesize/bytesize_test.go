package bytesize

import "testing"

func TestFormat(t *testing.T) {
	for n, want := range map[int64]string{512: "512", 1 << 20: "1M", 4 << 30: "4G", 1536 << 20: "1.5G", 3 << 40: "3T", 1025: "1.0K"} {
		if got := Format(n); got != want {
			t.Errorf("Format(%d) = %q, want %q", n, got, want)
		}
	}
}
