package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/termsafe"
	"github.com/agentbox/agentbox/shadow"
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

func TestFilterSessions(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.Local)
	var recs []shadow.Record
	for i := range 5 { // newest first: 12:00, 11:00, ... 08:00
		recs = append(recs, shadow.Record{ID: fmt.Sprint(i), Start: now.Add(-time.Duration(i) * time.Hour)})
	}
	ids := func(rs []shadow.Record) string {
		var s []string
		for _, r := range rs {
			s = append(s, r.ID)
		}
		return strings.Join(s, ",")
	}
	for _, tc := range []struct {
		n     int
		since string
		want  string
	}{
		{0, "", "0,1,2,3,4"},
		{2, "", "0,1"},
		{0, "150m", "0,1,2"},
		{1, "150m", "0"},
		{0, "2026-12-01T09:30", "0,1,2"},
		{0, "1d", "0,1,2,3,4"},
		{9, "", "0,1,2,3,4"},
	} {
		got, err := filterSessions(recs, tc.n, tc.since, now)
		if err != nil || ids(got) != tc.want {
			t.Errorf("n=%d since=%q: got %s, %v; want %s", tc.n, tc.since, ids(got), err, tc.want)
		}
	}
	for _, bad := range []string{"yesterday", "-2h", "3x"} {
		if _, err := filterSessions(recs, 0, bad, now); err == nil {
			t.Errorf("since %q: no error", bad)
		}
	}
	if _, err := filterSessions(recs, -1, "", now); err == nil {
		t.Errorf("n=-1: no error")
	}
}
