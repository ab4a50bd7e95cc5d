package policy

import (
	"strings"
	"testing"
)

// TestLimitValues: each limit's accepted values, and a one-line reason for every
// bad one (no unit, zero, negative, absurd).
func TestLimitValues(t *testing.T) {
	const ram, pidMax, ncpu = 24 << 30, 4194304, 8
	for _, c := range []struct {
		kind, in string
		want     int64
		err      string
	}{
		{"memory", "", 0, ""},
		{"memory", "2G", 2 << 30, ""},
		{"memory", "512m", 512 << 20, ""},
		{"memory", "16777216", 16 << 20, ""},
		{"memory", "24G", 24 << 30, ""},
		{"memory", "512", 0, "below the minimum of 16M (a number without a suffix is bytes)"},
		{"memory", "0", 0, "not a positive size"},
		{"memory", "-1G", 0, "not a positive size"},
		{"memory", "1.5G", 0, "not a positive size"},
		{"memory", "25G", 0, "more than this machine's memory (24G)"},
		{"memory", "99999999999T", 0, "not a positive size"},
		{"pids", "", 0, ""},
		{"pids", "512", 512, ""},
		{"pids", "8", 8, ""},
		{"pids", "4194304", 4194304, ""},
		{"pids", "7", 0, "below the minimum of 8"},
		{"pids", "0", 0, "not a positive whole number"},
		{"pids", "-1", 0, "not a positive whole number"},
		{"pids", "+5", 0, "not a positive whole number"},
		{"pids", "1e3", 0, "not a positive whole number"},
		{"pids", "10k", 0, "not a positive whole number"},
		{"pids", "4194305", 0, "more than this machine's kernel.pid_max (4194304)"},
		{"pids", "99999999999999999999", 0, "not a positive whole number"},
		{"cpus", "", 0, ""},
		{"cpus", "0.5", 500, ""},
		{"cpus", ".5", 500, ""},
		{"cpus", "2", 2000, ""},
		{"cpus", "1.25", 1250, ""},
		{"cpus", "0.01", 10, ""},
		{"cpus", "8", 8000, ""},
		{"cpus", "0", 0, "below the minimum of 0.01"},
		{"cpus", "0.001", 0, "at most two decimals"},
		{"cpus", "0.00", 0, "below the minimum of 0.01"},
		{"cpus", "-1", 0, "not a number of CPUs"},
		{"cpus", "1e9", 0, "not a number of CPUs"},
		{"cpus", "1000000000", 0, "not a number of CPUs"},
		{"cpus", "9", 0, "more than this machine's 8 CPUs"},
		{"cpus", "inf", 0, "not a number of CPUs"},
		{"cpus", "NaN", 0, "not a number of CPUs"},
		{"cpus", "1.", 0, "not a number of CPUs"},
		{"cpus", ".", 0, "not a number of CPUs"},
		{"cpus", "0x10", 0, "not a number of CPUs"},
		{"cpus", " 1", 0, "not a number of CPUs"},
	} {
		var got int64
		var err error
		switch c.kind {
		case "memory":
			got, err = MemoryLimit(c.in, ram)
		case "pids":
			got, err = PidsLimit(c.in, pidMax)
		case "cpus":
			got, err = CPULimit(c.in, ncpu)
		}
		switch {
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("--%s %q = %d, %v; want %d", c.kind, c.in, got, err, c.want)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("--%s %q: error %v, want one containing %q", c.kind, c.in, err, c.err)
		case err != nil && strings.Contains(err.Error(), "\n"):
			t.Errorf("--%s %q: error on more than one line: %q", c.kind, c.in, err)
		}
	}
}

// TestFormatCPUs: the dry run and the narrowing messages write --cpus as it is read.
func TestFormatCPUs(t *testing.T) {
	for milli, want := range map[int64]string{500: "0.5", 2000: "2", 10: "0.01", 1250: "1.25"} {
		if got := FormatCPUs(milli); got != want {
			t.Errorf("FormatCPUs(%d) = %q, want %q", milli, got, want)
		}
	}
}
