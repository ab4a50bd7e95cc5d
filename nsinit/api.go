// Package nsinit is the native backend. Its parent side starts the init in new
// namespaces and hands it the mount plan; the init (PID 1 of the new PID namespace)
// applies the plan with system calls, drops every privilege, starts the command,
// reaps orphans, passes signals on and reports the command's status. The init is the
// re-executed agentbox binary (init_linux.go), or, for a launcher that is a process of
// its own on amd64 and Linux 5.12+, the raw init: a clone of the launcher that runs
// the plan compiled into system calls without a Go runtime of its own
// (rawinit_linux_amd64.go, rawlaunch_linux_amd64.go).
package nsinit

import (
	"os"
	"os/signal"
	"syscall"
	"time"
)

// Stdio are the command's standard streams.
type Stdio struct {
	Stdin, Stdout, Stderr *os.File
}

// Options say how to launch, beyond the plan. The zero value launches the running
// binary as the init with the caller's environment and no standard streams.
type Options struct {
	Stdio
	// Env is the command's environment; nil means the caller's (os.Environ).
	Env []string
	// InitBinary is the agentbox binary re-executed as the init; empty means the
	// running binary (/proc/self/exe), whose main must call IsInit and Main first.
	InitBinary string
	// Signals is a registration of the Forwarded signals made ahead of the launch
	// (CatchSignals); nil: the launch registers them itself.
	Signals *SignalCatch
	// RawInit runs PID 1 without a Go runtime of its own, in a clone that shares the
	// launcher's memory (rawinit_linux_amd64.go), where the machine allows it (amd64,
	// Linux 5.12); elsewhere the re-executed init runs. It makes the launcher's
	// process non-dumpable: for a launcher that is a process of its own, the CLI.
	RawInit bool
	// BeforeExec, when set, runs in the launcher once the launch has begun; the
	// command starts only after it returns nil, and an error ends the launch before
	// the command starts (the init is killed) and is returned as it is. The raw init
	// builds the sandbox meanwhile, so host work the command must wait for but the
	// sandbox does not (the audit's baseline, the metadata snapshot) costs no time
	// of its own; with the Go init it runs before the init starts. Signals meanwhile
	// do what they would do uncaught: the launch takes them over after it.
	BeforeExec func() error
}

// env is the command's environment: Env, or the caller's.
func (o Options) env() []string {
	if o.Env == nil {
		return os.Environ()
	}
	return o.Env
}

// Names of the launcher-side phases every launch reports (the init's own are named
// after their step).
const (
	PhaseClone = "clone+idmap" // from the start of the launch to the init running
	PhaseSetup = "total-setup" // from the start of the launch to the command started
	// PhaseGate is the raw init's wait, its sandbox built, for Options.BeforeExec.
	PhaseGate = "wait for the launcher"
)

// Phase is one measured step of a launch.
type Phase struct {
	Name string        `json:"name"`
	Dur  time.Duration `json:"ns"`
}

// Result is how a session ended.
type Result struct {
	Status  int     // the command's exit status, or 128+N for signal N
	Phases  []Phase // setup timings, in order
	InitPID int     // the init's PID in the launcher's namespace
	// InitPeakRSSKiB is the init's own peak resident set (KiB), 0 when it did not
	// report one (under bwrap, or when it ended abnormally).
	InitPeakRSSKiB int64
}

// Timer records consecutive phases, each from the previous mark: the init's setup
// steps, and the launcher's own around the backend.
type Timer struct {
	start, last time.Time
	Phases      []Phase
}

// NewTimer starts timing now.
func NewTimer() *Timer {
	now := time.Now()
	return &Timer{start: now, last: now}
}

// Mark ends the phase that ran since the previous mark and names it.
func (t *Timer) Mark(name string) {
	now := time.Now()
	t.Phases = append(t.Phases, Phase{Name: name, Dur: now.Sub(t.last)})
	t.last = now
}

// Skip starts a new phase without recording the time since the previous mark.
func (t *Timer) Skip() { t.last = time.Now() }

// Total is the time since the timer started.
func (t *Timer) Total() time.Duration { return time.Since(t.start) }

// SignalCatch is a registration of the Forwarded signals, made in the background.
// os/signal registers each signal with a round trip to a thread of its own, about a
// millisecond for the set on a 2-core VM: a launcher that knows early that it will
// launch (the CLI, once its flags are read) starts it then, and the launch finds it
// done.
//
// Until a launch takes the signals over, they act as if they were not caught: one
// that would end the process ends it (a Ctrl-C during a long metadata snapshot stops
// agentbox then, not when the command has started); SIGWINCH is dropped.
type SignalCatch struct {
	c     chan os.Signal // registered with os/signal
	out   chan os.Signal // what the launch reads, once it has taken over
	taken chan struct{}  // closed by the launch's take-over
	done  chan struct{}  // closed once registered
}

// CatchSignals starts registering the Forwarded signals.
func CatchSignals() *SignalCatch {
	s := &SignalCatch{c: make(chan os.Signal, 16), out: make(chan os.Signal, 16),
		taken: make(chan struct{}), done: make(chan struct{})}
	go func() {
		signal.Notify(s.c, Forwarded...)
		close(s.done)
		for sig := range s.c {
			select {
			case <-s.taken:
				s.out <- sig
			default:
				actAsUncaught(sig)
			}
		}
	}()
	return s
}

// actAsUncaught does what sig would have done to a process that did not catch it:
// every Forwarded signal but SIGWINCH ends it, as that signal.
func actAsUncaught(sig os.Signal) {
	if sig == syscall.SIGWINCH {
		return
	}
	signal.Reset(sig)
	_ = syscall.Kill(os.Getpid(), sig.(syscall.Signal))
}

// signals waits for the registration, takes the signals over for the launch and
// returns their channel.
func (s *SignalCatch) signals() <-chan os.Signal {
	<-s.done
	select {
	case <-s.taken:
	default:
		close(s.taken)
	}
	return s.out
}

// Stop ends the registration; the signals get their default action again. nil is a
// no-op.
func (s *SignalCatch) Stop() {
	if s != nil {
		<-s.done
		signal.Stop(s.c)
	}
}
