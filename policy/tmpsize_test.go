package policy

import (
	"strings"
	"testing"
)

func TestTmpSize(t *testing.T) {
	const ram = 24 << 30
	for _, c := range []struct {
		in   string
		want int64
		err  string
	}{
		{"", 4 << 30, ""},
		{"8M", 8 << 20, ""},
		{"8m", 8 << 20, ""},
		{"2G", 2 << 30, ""},
		{"1048576", 1 << 20, ""},
		{"1024K", 1 << 20, ""},
		{"24G", 24 << 30, ""},
		{"0", 0, "not a positive size"},
		{"0G", 0, "not a positive size"},
		{"-1", 0, "not a positive size"},
		{"-8M", 0, "not a positive size"},
		{"+8M", 0, "not a positive size"},
		{"1.5G", 0, "not a positive size"},
		{"8X", 0, "not a positive size"},
		{"M", 0, "not a positive size"},
		{" 8M", 0, "not a positive size"},
		{"8 M", 0, "not a positive size"},
		{"9223372036854775807T", 0, "not a positive size"},
		{"99999999999999999999", 0, "not a positive size"},
		{"512", 0, "below the minimum of 1M"},
		{"1023K", 0, "below the minimum of 1M"},
		{"25G", 0, "more than this machine's memory (24G)"},
		{"8000T", 0, "more than this machine's memory"},
	} {
		got, err := TmpSize(c.in, ram)
		switch {
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("TmpSize(%q) = %d, %v; want %d", c.in, got, err, c.want)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("TmpSize(%q) = %d, %v; want an error saying %q", c.in, got, err, c.err)
		}
	}
	// RAM unknown: no upper bound but the type's.
	if got, err := TmpSize("8000T", 0); err != nil || got != 8000<<40 {
		t.Errorf("TmpSize(8000T) with RAM unknown = %d, %v", got, err)
	}
}

func TestDefaultTmpSize(t *testing.T) {
	for _, c := range []struct{ ram, want int64 }{
		{0, 4 << 30},             // unknown: the cap
		{64 << 30, 4 << 30},      // a quarter would be 16G: capped
		{16 << 30, 4 << 30},      // exactly the cap
		{8 << 30, 2 << 30},       // a quarter
		{1000 << 20, 250 << 20},  // rounded down to a MiB
		{1001 << 20, 250 << 20},  //
		{2 << 20, MinTmpSize},    // never below the minimum
		{23 << 30, 4 << 30},      //
		{12 << 30, 3 << 30},      //
		{3<<30 + 7, 768 << 20},   //
		{4097 << 20, 1024 << 20}, //
	} {
		if got := DefaultTmpSize(c.ram); got != c.want {
			t.Errorf("DefaultTmpSize(%d) = %d, want %d", c.ram, got, c.want)
		}
	}
}

// TestNewTmpSize: the policy carries the budget, the default when none is given,
// and a bad one is refused naming the flag.
func TestNewTmpSize(t *testing.T) {
	repo := t.TempDir()
	p, err := New(Options{Cwd: repo, Repo: repo})
	if err != nil || p.TmpSize != DefaultTmpSize(TotalRAM()) {
		t.Fatalf("default budget: %v, %v; want %d", p, err, DefaultTmpSize(TotalRAM()))
	}
	if p, err = New(Options{Cwd: repo, Repo: repo, TmpSize: "8M"}); err != nil || p.TmpSize != 8<<20 {
		t.Fatalf("--tmp-size 8M: %v, %v", p, err)
	}
	_, err = New(Options{Cwd: repo, Repo: repo, TmpSize: "0"})
	if err == nil || !strings.HasPrefix(err.Error(), `--tmp-size 0: not a positive size`) {
		t.Errorf("--tmp-size 0: %v", err)
	}
}
