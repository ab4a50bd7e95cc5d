package nsinit

import (
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

func TestMain(m *testing.M) {
	// The test binary is also the re-executed init (the raw init's fallback), and
	// the helper of TestSignalCatch.
	if IsInit() {
		Main()
	}
	if os.Getenv(catchHelper) != "" {
		catchHelperMain(os.Getenv(catchHelper))
	}
	if os.Getenv(launchHelper) != "" {
		launchHelperMain(os.Getenv(launchHelper), os.Args[1:])
	}
	code := m.Run()
	testenv.Cleanup()
	os.Exit(code)
}

const catchHelper = "AGENTBOX_TEST_CATCH_HELPER"

// catchHelperMain registers the forwarded signals, hands them to a launch or not
// (mode "taken" or "early"), or hands them over and ends the launch ("over"), or
// stops the registration ("stopped"), or sends a SIGWINCH before the take-over
// ("winch"), sends itself signals, and says what became of them.
func catchHelperMain(mode string) {
	s := CatchSignals()
	<-s.done
	switch mode {
	case "winch":
		// A resize before the take-over is dropped, and does not lose the ones after.
		_ = syscall.Kill(os.Getpid(), syscall.SIGWINCH)
		time.Sleep(50 * time.Millisecond)
		printSignals(s.signals(), 1, syscall.SIGWINCH)
	case "over":
		s.signals()
		s.launchOver()
	case "stopped":
		s.Stop()
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGTERM) // os/signal has them back
		printSignals(c, 1, syscall.SIGTERM)
	case "taken":
		printSignals(s.signals(), 2, syscall.SIGWINCH, syscall.SIGTERM)
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGWINCH) // dropped: does not end the process
	_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
	time.Sleep(10 * time.Second)
	os.Exit(3) // SIGTERM did not end it
}

// printSignals sends itself send, prints the first n signals that arrive on c, one
// a line, and exits: 0, or 1 when one does not come.
func printSignals(c <-chan os.Signal, n int, send ...syscall.Signal) {
	for _, sig := range send {
		_ = syscall.Kill(os.Getpid(), sig)
	}
	for i := 0; i < n; i++ {
		select {
		case sig := <-c:
			os.Stdout.WriteString(sig.String() + "\n")
		case <-time.After(10 * time.Second):
			os.Stdout.WriteString("nothing\n")
			os.Exit(1)
		}
	}
	os.Exit(0)
}

// The forwarded signals registered ahead of a launch act as uncaught until the launch
// takes them over (a Ctrl-C before the command starts ends agentbox), reach the launch
// after, act as uncaught again once the launch is over, and are os/signal's again
// after Stop.
func TestSignalCatch(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	early := exec.Command(self)
	early.Env = append(os.Environ(), catchHelper+"=early")
	err = early.Run()
	ws, ok := early.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Errorf("SIGTERM before the take-over: %v (%v), want death by SIGTERM", err, early.ProcessState)
	}
	over := exec.Command(self)
	over.Env = append(os.Environ(), catchHelper+"=over")
	err = over.Run()
	if ws, ok := over.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Errorf("SIGTERM after the launch: %v (%v), want death by SIGTERM", err, over.ProcessState)
	}
	winch := exec.Command(self)
	winch.Env = append(os.Environ(), catchHelper+"=winch")
	if out, err := winch.Output(); err != nil || string(out) != "window changed\n" {
		t.Errorf("SIGWINCH after one before the take-over: %v, %q", err, out)
	}
	stopped := exec.Command(self)
	stopped.Env = append(os.Environ(), catchHelper+"=stopped")
	if out, err := stopped.Output(); err != nil || string(out) != "terminated\n" {
		t.Errorf("after Stop, os/signal: %v, %q", err, out)
	}
	taken := exec.Command(self)
	taken.Env = append(os.Environ(), catchHelper+"=taken")
	out, err := taken.Output()
	// Pending signals are delivered lowest number first: either order is fine.
	if got := string(out); err != nil || (got != "window changed\nterminated\n" && got != "terminated\nwindow changed\n") {
		t.Errorf("after the take-over: %v, %q", err, out)
	}
}
