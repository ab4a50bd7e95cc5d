package kmatrix

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/agentbox/agentbox/kmatrix/vmproto"
)

// Result is one cell's outcome.
type Result struct {
	Cell     string         `json:"cell"`
	Why      string         `json:"why"`
	Packages []PackageEntry `json:"packages,omitempty"`
	// Release is the kernel release the VM reported (uname -r).
	Release string         `json:"release,omitempty"`
	Cmdline string         `json:"cmdline"`
	Modules []LoadedModule `json:"modules,omitempty"`
	Seconds float64        `json:"seconds"` // the VM's wall time (of the last boot)
	Booted  bool           `json:"booted"`
	// Retried says why the VM was booted a second time, if it was.
	Retried string `json:"retried,omitempty"`
	// Completed: the init ran everything and reached power-off.
	Completed bool `json:"completed"`
	// Features are doctor's checks as measured inside the VM, by the test user.
	Features []Feature `json:"features,omitempty"`
	// DoctorExit is doctor's exit status (0 ready, 1 not ready); -1 if it did not run.
	DoctorExit  int       `json:"doctor_exit"`
	NativeReady bool      `json:"native_ready"`
	Refusal     string    `json:"refusal,omitempty"`
	Tests       []TestRow `json:"tests"`
	// Problems say why the cell failed; empty when it passed.
	Problems    []string `json:"problems,omitempty"`
	Pass        bool     `json:"pass"`
	Verdict     string   `json:"verdict"`
	ConsoleTail string   `json:"console_tail,omitempty"`
}

// LoadedModule is a module the VM's init loaded.
type LoadedModule struct {
	Name        string `json:"name"`
	Params      string `json:"params,omitempty"`
	Compression string `json:"compression,omitempty"` // as the package shipped it
}

// Feature is one check doctor made in the VM.
type Feature struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail,omitempty"`
}

func (r Result) fail(problem string) Result {
	r.Problems = append(r.Problems, problem)
	r.Verdict = r.verdict()
	return r
}

func (r Result) verdict() string {
	if len(r.Problems) == 0 {
		return fmt.Sprintf("pass (%s, %.1f s)", r.Release, r.Seconds)
	}
	return "FAIL: " + strings.Join(r.Problems, "; ")
}

// doctorJSON is the part of `agentbox doctor --json` kmatrix reads.
type doctorJSON struct {
	Kernel      string    `json:"kernel"`
	Checks      []Feature `json:"checks"`
	NativeReady bool      `json:"native_ready"`
	Refusal     string    `json:"refusal"`
}

// evaluate fills the result from the console and decides what is wrong.
func (r *Result) evaluate(c Cell, kf KernelFiles, log consoleLog) {
	r.Release = log.Release
	r.Booted = log.Release != ""
	r.Completed = log.Done
	if !r.Booted {
		r.Problems = append(r.Problems, "the VM did not reach the init")
		return
	}
	if kf.Release != "" && log.Release != kf.Release {
		r.Problems = append(r.Problems, fmt.Sprintf("booted kernel %s, expected %s", log.Release, kf.Release))
	}
	for _, e := range log.Errors {
		r.Problems = append(r.Problems, "init: "+e)
	}
	if !log.Done && len(log.Errors) == 0 {
		r.Problems = append(r.Problems, "the init did not finish")
	}
	for _, s := range log.Sections {
		if s.Name == vmproto.Doctor {
			r.evaluateDoctor(c, s)
			continue
		}
		rows := parseGoTest(s.Name, s.Output)
		failed := 0
		for _, row := range rows {
			if row.Status == "fail" {
				failed++
			}
		}
		switch {
		case !s.Ended:
			rows = append(rows, TestRow{Binary: s.Name, Name: "(binary)", Status: "fail", Reason: "did not finish: " + lastLines(strings.Split(strings.TrimSpace(s.Output), "\n"), 6)})
			failed++
		case s.Status != 0 && failed == 0:
			rows = append(rows, TestRow{Binary: s.Name, Name: "(binary)", Status: "fail", Reason: fmt.Sprintf("exit status %d: %s", s.Status, crashReason(s.Output))})
			failed++
		}
		if failed > 0 {
			r.Problems = append(r.Problems, fmt.Sprintf("%s: %d test(s) failed", s.Name, failed))
		}
		r.Tests = append(r.Tests, rows...)
	}
}

// bootFailure picks the line that says why a kernel did not boot: its panic
// message, else the console's last line.
func bootFailure(console []byte) string {
	lines := strings.Split(strings.TrimSpace(cleanConsole(console)), "\n")
	for _, l := range lines {
		if strings.Contains(l, "Kernel panic") {
			return strings.TrimSpace(l)
		}
	}
	return lastLines(lines, 1)
}

// crashReason picks what explains a test binary that died without a failed test:
// Go's panic line and the lines after it (for a timeout, the tests still running),
// else the last lines.
func crashReason(output string) string {
	lines := strings.Split(strings.TrimSpace(output), "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "panic: ") {
			end := min(i+8, len(lines))
			return strings.Join(lines[i:end], "\n")
		}
	}
	return lastLines(lines, 6)
}

func (r *Result) evaluateDoctor(c Cell, s section) {
	r.DoctorExit = s.Status
	var d doctorJSON
	if err := json.Unmarshal([]byte(s.Output), &d); err != nil {
		r.Problems = append(r.Problems, fmt.Sprintf("doctor (exit %d) printed no JSON: %v: %s", s.Status, err, lastLines(strings.Split(strings.TrimSpace(s.Output), "\n"), 3)))
		return
	}
	r.Features, r.NativeReady, r.Refusal = d.Checks, d.NativeReady, d.Refusal
	wantExit := 1
	if d.NativeReady {
		wantExit = 0
	}
	if s.Status != wantExit {
		r.Problems = append(r.Problems, fmt.Sprintf("doctor exited %d with native_ready=%v", s.Status, d.NativeReady))
	}
	if d.NativeReady != c.NativeReady {
		r.Problems = append(r.Problems, fmt.Sprintf("doctor says native_ready=%v, this cell expects %v (%s)", d.NativeReady, c.NativeReady, d.Refusal))
	}
}

// FeatureNames lists the features measured across results, in doctor's order.
func featureNames(results []Result) []string {
	var names []string
	seen := map[string]bool{}
	for _, r := range results {
		for _, f := range r.Features {
			if !seen[f.Name] {
				seen[f.Name] = true
				names = append(names, f.Name)
			}
		}
	}
	return names
}

func sortedRows(rows []TestRow) []TestRow {
	out := append([]TestRow(nil), rows...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Binary < out[j].Binary })
	return out
}
