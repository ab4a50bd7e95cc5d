package vmtest

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestBenchLimits: agentbox bench measures the limit variants (native-limits:
// --pids and --cpus; native-memory: --memory too) beside native, interleaved, where
// the host enforces those limits, and elsewhere skips each with a note carrying
// agentbox's refusal, never measuring a launch that did not run. In the kernel
// matrix's delegated cell this is the launch cost of the limits (issue 33), logged
// with its ratios. Where the native backend refuses, the bench refuses too, in one
// line carrying agentbox's refusal, and measures nothing.
func TestBenchLimits(t *testing.T) {
	rep, _ := doctor(t)
	if !rep.NativeReady {
		benchRefuses(t, rep.Kernel)
		return
	}
	ok := map[string]bool{}
	for _, l := range rep.Limits {
		ok[l.Flag] = l.OK
	}
	want := map[string]bool{
		"native-limits": ok["--pids"] && ok["--cpus"],
		"native-memory": ok["--pids"] && ok["--cpus"] && ok["--memory"],
	}
	if os.Getenv(EnvDelegated) == "1" && !(want["native-limits"] && want["native-memory"]) {
		t.Fatalf("the delegated cell's doctor says not every limit is enforced: %+v", rep.Limits)
	}
	runs := []string{"--runs", "1", "--warmup", "0"}
	if want["native-limits"] {
		runs = []string{"--runs", "5", "--warmup", "0"}
	}
	args := append([]string{"bench", "--no-store", "--json"}, runs...)
	if _, err := os.Stat(sandboxtest.BuiltBwrap); err == nil {
		args = append(args, "--bwrap", sandboxtest.BuiltBwrap)
	}
	out, errOut, code := run(t, testenv.Dir(t, "cwd"), args...)
	if code != 0 {
		t.Fatalf("agentbox %s: exit %d\n%s", strings.Join(args, " "), code, errOut)
	}
	var bench struct {
		Notes    []string `json:"notes"`
		Variants []struct {
			Name    string    `json:"name"`
			Samples []float64 `json:"wall_ms"`
			Failed  int       `json:"failed"`
		} `json:"variants"`
		Ratios map[string]float64 `json:"ratios"`
	}
	if err := json.Unmarshal([]byte(out), &bench); err != nil {
		t.Fatalf("bench --json: %v\n%s", err, out)
	}
	for name, enforced := range want {
		measured := -1
		for _, v := range bench.Variants {
			if v.Name == name {
				measured = len(v.Samples)
				if v.Failed != 0 {
					t.Errorf("%s: %d launches failed", name, v.Failed)
				}
			}
		}
		noted := false
		for _, n := range bench.Notes {
			noted = noted || strings.HasPrefix(n, name+" skipped") && strings.Contains(n, "exit status 125") && strings.Contains(n, "refused")
		}
		switch {
		case enforced && measured <= 0:
			t.Errorf("%s: the host enforces its limits, yet the bench measured no launch of it (notes %q)", name, bench.Notes)
		case enforced:
			t.Logf("%s: %d launches; %s/native %.3f wall, cpu %.3f", name, measured, name,
				bench.Ratios[name+"/native"], bench.Ratios["cpu:"+name+"/native"])
		case measured >= 0 || !noted:
			t.Errorf("%s: not enforced here, yet measured (%d) or skipped without agentbox's refusal in a note (%q)", name, measured, bench.Notes)
		}
	}
}

// benchRefuses: on a kernel where agentbox refuses the native backend, agentbox
// bench exits 125, its last line saying so and passing on agentbox's refusal,
// instead of timing refusals.
func benchRefuses(t *testing.T, kernel string) {
	args := []string{"bench", "--no-store", "--runs", "1", "--warmup", "0"}
	if _, err := os.Stat(sandboxtest.BuiltBwrap); err == nil {
		args = append(args, "--bwrap", sandboxtest.BuiltBwrap)
	}
	out, errOut, code := run(t, testenv.Dir(t, "cwd"), args...)
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	line := lines[len(lines)-1]
	if code != 125 || strings.Contains(errOut, "panic") || strings.Contains(errOut, "goroutine ") ||
		!strings.HasPrefix(line, "agentbox: bench: the native backend cannot launch here") ||
		!strings.Contains(line, "exit status 125") || out != "" {
		t.Fatalf("kernel %s: agentbox bench where native refuses: exit %d, want 125 and one line with the refusal\nstdout: %s\nstderr: %s", kernel, code, out, errOut)
	}
	t.Logf("kernel %s: %s", kernel, line)
}
