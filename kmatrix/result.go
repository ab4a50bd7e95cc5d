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
	r.Problems = append(r.Problems, unjustifiedSkips(r.Tests, r.Features)...)
}

// unjustifiedSkips names every skipped test of a cell that is not a kernel gate
// (vmproto.KernelGate) for a feature doctor measured missing in the same VM. The VM
// is built to have every tool and privilege; what it may lack is kernel features, and
// those doctor has measured, so a skip for anything else — or for a feature this
// kernel has — would be a missing piece behind a passing cell.
func unjustifiedSkips(tests []TestRow, features []Feature) []string {
	missing := map[string]bool{}
	known := map[string]bool{}
	for _, f := range features {
		known[f.Name] = true
		missing[f.Name] = !f.OK
	}
	var problems []string
	for _, t := range tests {
		if t.Status != "skip" {
			continue
		}
		feature, ok := kernelGate(t.Reason)
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("%s %s skipped, and only a kernel gate may skip in a VM: %s", t.Binary, t.Name, t.Reason))
		case !known[feature]:
			problems = append(problems, fmt.Sprintf("%s %s skipped for %q, which doctor does not measure: %s", t.Binary, t.Name, feature, t.Reason))
		case !missing[feature]:
			problems = append(problems, fmt.Sprintf("%s %s skipped for lacking %s, which doctor found present: %s", t.Binary, t.Name, feature, t.Reason))
		}
	}
	return problems
}

// kernelGate reads the feature from a skip's reason, "file_test.go:12: kernel lacks
// FEATURE: why": the last line of the test's log, which is the skip's own.
func kernelGate(reason string) (string, bool) {
	line := reason[strings.LastIndex(reason, "\n")+1:]
	_, rest, found := strings.Cut(line, ": "+vmproto.KernelGate)
	if !found {
		return "", false
	}
	feature, _, found := strings.Cut(rest, ":")
	return feature, found && feature != ""
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
