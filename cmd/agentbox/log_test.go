package main

import (
	"bytes"
	"testing"

	"github.com/agentbox/agentbox/internal/termsafe"
)

// TestDiffEscaper: agentbox diff on a terminal writes through termsafe.Writer.
func TestDiffEscaper(t *testing.T) {
	for _, tc := range []struct {
		in   []string // successive writes
		want string
	}{
		{[]string{"+plain line\n\tindented\n"}, "+plain line\n\tindented\n"},
		{[]string{"+hide\x1b[2K\x1b[1Aback\r\n"}, "+hide\\x1b[2K\\x1b[1Aback\\r\n"},
		{[]string{"del\x7f bell\x07\n"}, "del\\x7f bell\\x07\n"},
		{[]string{"c1 \xc2\x9b2K\n"}, "c1 \\u009b2K\n"},
		{[]string{"split \xc2", "\x9b2K\n"}, "split \\u009b2K\n"},
		{[]string{"é stays \xc3\xa9 and \xc2\xa0 too\n"}, "é stays é and \u00a0 too\n"},
		{[]string{"bidi \u202eevil\n"}, "bidi \\u202eevil\n"},
		{[]string{"ends in \xc2"}, "ends in \\xc2"},
	} {
		var out bytes.Buffer
		e := termsafe.NewWriter(&out)
		for _, s := range tc.in {
			if n, err := e.Write([]byte(s)); err != nil || n != len(s) {
				t.Fatalf("Write(%q) = %d, %v", s, n, err)
			}
		}
		e.Flush()
		if out.String() != tc.want {
			t.Errorf("%q: got %q, want %q", tc.in, out.String(), tc.want)
		}
	}
}

func TestShellJoin(t *testing.T) {
	got := shellJoin([]string{"sh", "-c", "echo 'hi' > x", ""})
	if want := `sh -c 'echo '\''hi'\'' > x' ''`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}
