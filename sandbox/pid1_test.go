package sandbox

import "testing"

// The Go API's init (the re-executed Go init) catches no signal: every signal sent to
// PID 1 from inside, SIGKILL, SIGSTOP and SIGSEGV included, is dropped by the kernel;
// the command's status comes back, and nothing else is printed (its runtime printed
// a traceback on SIGSEGV, and SIGTERM ended it).
func TestPID1IgnoresSignalsFromInside(t *testing.T) {
	if !asTestUser(t) {
		return
	}
	res, out := runCaptured(t, Options{}, "", `grep SigCgt /proc/1/status
		s=1
		while [ $s -le 64 ]; do kill -$s 1 2>/dev/null; s=$((s+1)); done
		sleep 0.2
		grep -q '^State:.*[RS]' /proc/1/status && exit 7`)
	if res.Status != 7 || out != "SigCgt:\t0000000000000000\n" {
		t.Errorf("after every signal from inside: status %d, output %q; want 7 and only PID 1's empty SigCgt", res.Status, out)
	}
}
