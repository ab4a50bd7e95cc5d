package cli

import (
	"bytes"
	"flag"
	"strings"
	"testing"
)

func TestRewrite(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"flag provided but not defined: -claude", "unknown flag: --claude"},
		{"flag provided but not defined: -n", "unknown flag: -n"},
		{"flag needs an argument: -repo", "flag needs an argument: --repo"},
		{`invalid value "x" for flag -runs: parse error`, `invalid value "x" for --runs: parse error`},
		{`invalid boolean value "x" for -offline: parse error`, `invalid boolean value "x" for --offline: parse error`},
		{"something else", "something else"},
	} {
		if got := rewrite(tc.in); got != tc.want {
			t.Errorf("rewrite(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestHelpHidesInternalAndListsAll(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.String("repo", "", "the `DIR`")
	fs.Bool("offline", false, "no network")
	fs.Int("n", 0, "show `N` entries")
	fs.Bool("serve", false, "internal: not for users")
	var out bytes.Buffer
	err := Parse(fs, Command{Name: "x", Args: "ID", Help: "Does x."}, []string{"--help"}, &out)
	if err != ErrHelp {
		t.Fatalf("Parse(--help) = %v", err)
	}
	got := out.String()
	for _, want := range []string{"Usage: agentbox x [-n N] [--offline] [--repo DIR] ID", "  --repo DIR", "  --offline", "  -n N", "Does x."} {
		if !strings.Contains(got, want) {
			t.Errorf("help lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "serve") {
		t.Errorf("help shows an internal flag:\n%s", got)
	}
}
