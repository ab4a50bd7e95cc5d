// Package nsinit is the native backend's launcher, and the one way session and
// sandbox run a plan (Driver). It starts the init in new namespaces and hands it the
// mount plan; the init (PID 1 of the new PID namespace) runs the plan compiled into
// system calls (package program), drops every privilege, starts the command, reaps
// orphans, passes signals on and reports the command's status. The init is the
// re-executed agentbox binary (package goinit, speaking package protocol), or, for a
// launcher that is a process of its own on amd64 and Linux 5.12+, the raw init: a
// clone of the launcher that runs the same program without a Go runtime of its own
// (rawinit_linux_amd64.go, rawlaunch_linux_amd64.go).
package nsinit

import (
	"errors"
	"os"
	"os/signal"
	"syscall"

	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/nsinit/protocol"
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
	// Linux 5.12, a build without -race: RawInitAvailable); elsewhere the re-executed
	// init runs. It makes the launcher's process non-dumpable: for a launcher that
	// is a process of its own, the CLI.
	RawInit bool
	// BeforeExec, when set, runs in the launcher once the launch has begun; the
	// command starts only after it returns nil, and an error ends the launch before
	// the command starts (the init is killed) and is returned as it is. The raw init
	// builds the sandbox meanwhile, so host work the command must wait for but the
	// sandbox does not (the audit's baseline, the metadata snapshot) costs no time
	// of its own; with the Go init it runs before the init starts. Signals meanwhile
	// do what they would do uncaught: the launch takes them over after it.
	BeforeExec func() error
	// AfterStart, when set, runs in the launcher once the started process (the
	// init, or bwrap) exists, with its PID, and before the command can start: the Go
	// init has not had its plan yet, the raw init waits at its gate as for
	// BeforeExec. An error ends the launch. It places the session in its own cgroup
	// (internal/leafcg), where every later process of the session is born.
	AfterStart func(pid int) error
	// Listener, for a plan with a Proxy (--allow-net), gets the listening socket
	// the init created at plan.Proxy in the sandbox's network namespace, before the
	// command starts; the caller serves it and closes it. Called from the launch's
	// loop: it must not block. Nil: the socket is closed (nothing answers there).
	Listener func(*os.File)
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

// Phase is one measured step of a launch (protocol.Phase: the Go init reports its
// own in its started frame).
type Phase = protocol.Phase

// Result is how a session ended.
type Result struct {
	Status int // the command's exit status, or 128+N for signal N
	// Signal is the signal that killed the command, 0 when it exited (or when the
	// init could not say: it ended before reporting).
	Signal syscall.Signal
	// Left is how many processes of the sandbox were still running when the command
	// ended: the init killed them (nothing of a session outlives it).
	Left int
	// Terminal: when the session began, the launcher's process group held the
	// foreground of a terminal on one of its standard streams (an interactive
	// shell's foreground job, say): a terminal session.
	Terminal bool
	Phases   []Phase // setup timings, in order
	InitPID  int     // the init's PID in the launcher's namespace
	// InitPeakRSSKiB is the init's own peak resident set (KiB), 0 when it did not
	// report one (under bwrap, or when it ended abnormally).
	InitPeakRSSKiB int64
	// Prestarted: the init was started ahead of the session (Native.Spare).
	Prestarted bool
	// BackendVersion names what ran the sandbox when it is not agentbox itself
	// ("bubblewrap 0.12.0"), else "".
	BackendVersion string
}

// Driver is one backend's way of running a plan to the session's end: the native
// backend (Native) or bubblewrap (compat.Driver). session and sandbox launch through
// it and know nothing else of a backend.
type Driver interface {
	// Run builds the sandbox for plan, runs its command and waits for the session's
	// end. A *SetupError means the command never started.
	Run(plan mounts.Plan, opts Options) (Result, error)
}

// Timer records consecutive phases, each from the previous mark: the init's setup
// steps, and the launcher's own around the backend (protocol.Timer).
type Timer = protocol.Timer

// NewTimer starts timing now.
func NewTimer() *Timer { return protocol.NewTimer() }

// SignalCatch is a registration of the Forwarded signals for a launcher that is a
// process of its own (the CLI), made once it knows it will launch: the launch then
// finds it done.
//
// Where it can (amd64), it catches them with a handler of its own rather than through
// os/signal (signals_linux_amd64.go): os/signal's set-up costs three thread starts.
// Until Stop, os/signal does not see these signals: a program that relies on
// os/signal for them must not use CatchSignals. Elsewhere os/signal registers them,
// in the background (a round trip to a thread of its own per signal).
//
// Until a launch takes the signals over, and again once it is over, they act as if
// they were not caught: one that would end the process ends it (a Ctrl-C during a
// long metadata snapshot stops agentbox then, not when the command has started);
// SIGWINCH is dropped.
type SignalCatch struct {
	raw *rawCatch // nil: os/signal's
	// os/signal's: c is registered; out is what the launch reads once it has
	// taken over (taken closed).
	c, out      chan os.Signal
	taken, over chan struct{}
	done        chan struct{} // closed once registered
}

// CatchSignals registers the Forwarded signals.
func CatchSignals() *SignalCatch {
	s := &SignalCatch{done: make(chan struct{})}
	if rc, ok := catchRaw(Forwarded); ok {
		s.raw = rc
		close(s.done)
		return s
	}
	s.c, s.out = make(chan os.Signal, 16), make(chan os.Signal, 16)
	s.taken, s.over = make(chan struct{}), make(chan struct{})
	go func() {
		signal.Notify(s.c, Forwarded...)
		close(s.done)
		for sig := range s.c {
			select {
			case <-s.taken:
				select {
				case s.out <- sig:
				case <-s.over:
					actAsUncaught(sig)
				}
			default:
				actAsUncaught(sig)
			}
		}
	}()
	return s
}

// actAsUncaught does what sig would have done to a process that did not catch it
// through os/signal: every Forwarded signal but SIGWINCH ends it, as that signal.
func actAsUncaught(sig os.Signal) {
	if sig == syscall.SIGWINCH {
		return
	}
	signal.Reset(sig)
	_ = syscall.Kill(os.Getpid(), sig.(syscall.Signal))
}

// records takes the signals over for a raw init whose control socket is ctl: the
// handler writes them to it as records, and the launch reads nothing. false: not
// this way (the caller uses signals).
func (s *SignalCatch) records(ctl *os.File) bool {
	return s.raw != nil && s.raw.toRecords(ctl)
}

// signals waits for the registration, takes the signals over for the launch and
// returns their channel.
func (s *SignalCatch) signals() <-chan os.Signal {
	<-s.done
	if s.raw != nil {
		if c, ok := s.raw.toPipe(); ok {
			return c
		}
		return nil // the pipe failed: they stay uncaught
	}
	select {
	case <-s.taken:
	default:
		close(s.taken)
	}
	return s.out
}

// launchOver makes the signals act as if uncaught again.
func (s *SignalCatch) launchOver() {
	if s.raw != nil {
		s.raw.uncaught()
		return
	}
	select {
	case <-s.over:
	default:
		close(s.over)
	}
}

// Stop ends the registration; the signals get the action they had before it again.
// nil is a no-op.
func (s *SignalCatch) Stop() {
	if s == nil {
		return
	}
	<-s.done
	if s.raw != nil {
		s.raw.stop()
		return
	}
	signal.Stop(s.c)
}

// Native is the native backend as a Driver. Spare, when set and usable for the plan
// (Prestarted.Usable), is the init started ahead (Prestart, PrestartRaw); an unusable
// one is discarded and a fresh init starts. A Go-init spare that died while it
// waited (StepHandPlan) is replaced by a fresh init too, when no Options.BeforeExec
// has run for it yet (with one, the error is returned: the host work would run twice).
type Native struct {
	Spare *Prestarted
}

// Run implements Driver.
func (n Native) Run(plan mounts.Plan, opts Options) (Result, error) {
	if !n.Spare.Usable(plan, opts.InitBinary) {
		n.Spare.Discard()
		return Run(plan, opts)
	}
	res, err := RunPrestarted(n.Spare, plan, opts)
	var se *SetupError
	if opts.BeforeExec == nil && errors.As(err, &se) && se.Step == StepHandPlan {
		return Run(plan, opts)
	}
	res.Prestarted = true
	return res, err
}
