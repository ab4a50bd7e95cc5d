package vmtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/kernel"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.Cleanup()
	os.Exit(code)
}

type check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
	Fix    string `json:"fix"`
}

type doctorReport struct {
	Kernel      string  `json:"kernel"`
	Checks      []check `json:"checks"`
	NativeReady bool    `json:"native_ready"`
	Refusal     string  `json:"refusal"`
	Limits      []struct {
		Flag string `json:"flag"`
		OK   bool   `json:"ok"`
	} `json:"limits"`
}

// run runs the real binary as the test user and returns stdout, stderr and the exit
// status; failing to start it fails the test.
func run(t *testing.T, dir string, args ...string) (string, string, int) {
	t.Helper()
	home := testenv.Dir(t, "home")
	cmd := testenv.Command(t, home, testenv.Binary(t), args...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("agentbox %s: %v", strings.Join(args, " "), err)
	}
	return stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()
}

func doctor(t *testing.T) (doctorReport, int) {
	t.Helper()
	out, errOut, code := run(t, testenv.Dir(t, "cwd"), "doctor", "--json")
	var rep doctorReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("doctor --json (exit %d) printed no report: %v\nstdout: %s\nstderr: %s", code, err, out, errOut)
	}
	return rep, code
}

// TestDoctorExitMatchesVerdict: doctor exits 0 exactly when it says agentbox exec
// will work, and a negative verdict names a failed required check and its fix.
func TestDoctorExitMatchesVerdict(t *testing.T) {
	rep, code := doctor(t)
	t.Logf("kernel %s: native_ready=%v %s", rep.Kernel, rep.NativeReady, rep.Refusal)
	if rep.NativeReady && code != 0 || !rep.NativeReady && code != 1 {
		t.Fatalf("doctor exit %d with native_ready=%v", code, rep.NativeReady)
	}
	if len(rep.Checks) == 0 {
		t.Fatal("doctor reported no checks")
	}
	if rep.NativeReady {
		if rep.Refusal != "" {
			t.Errorf("ready, yet a refusal: %q", rep.Refusal)
		}
		return
	}
	if rep.Refusal == "" {
		t.Fatal("not ready, and no refusal message")
	}
	text, _, textCode := run(t, testenv.Dir(t, "cwd"), "doctor")
	if textCode != code {
		t.Errorf("doctor exits %d, doctor --json %d", textCode, code)
	}
	if !strings.Contains(text, "FAIL") || !strings.Contains(text, rep.Refusal) {
		t.Errorf("doctor's text does not show the failure and the refusal %q:\n%s", rep.Refusal, text)
	}
}

// TestExecTrue: where doctor says the default backend works, `agentbox exec -- true`
// succeeds; where it says not, exec refuses with 125 and doctor's message, before
// running anything.
func TestExecTrue(t *testing.T) {
	rep, _ := doctor(t)
	repo := testenv.Dir(t, "repo")
	// --repo: the refusal is checked alone, without the line that names the current
	// directory as the writable one when it is no Git repository.
	_, stderr, code := run(t, repo, "exec", "--no-record", "--repo", repo, "--", "true")
	if rep.NativeReady {
		if code != 0 {
			t.Fatalf("doctor says ready, but agentbox exec -- true exited %d: %s", code, stderr)
		}
		return
	}
	if code != 125 {
		t.Fatalf("doctor refuses (%s), but agentbox exec -- true exited %d: %s", rep.Refusal, code, stderr)
	}
	// The advice that matters is the fix of the first required check that failed
	// (Refusal is built from it); without a fix, the whole refusal.
	want := rep.Refusal
	for _, c := range rep.Checks {
		if s, _ := kernel.SpecOf(c.Name); !c.OK && s.Need == kernel.Required {
			if c.Fix != "" {
				want = c.Fix
			}
			break
		}
	}
	if !strings.Contains(stderr, want) {
		t.Errorf("agentbox exec refused without doctor's advice;\nstderr: %s\nwant it to contain: %s", strings.TrimSpace(stderr), want)
	}
	if n := strings.Count(strings.TrimSpace(stderr), "\n"); n > 0 {
		t.Errorf("refusal spans %d lines, want one: %s", n+1, stderr)
	}
}
