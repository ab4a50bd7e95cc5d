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

	"github.com/agentbox/agentbox/backend"
	"github.com/agentbox/agentbox/mounts"
)

// The launch's types are the backend seam's (package backend): one set of types
// from the init's report to the session's record, no copies between backends.
type (
	// Stdio are the command's standard streams.
	Stdio = backend.Stdio
	// Options say how to launch, beyond the plan.
	Options = backend.Options
	// Result is how a session ended.
	Result = backend.Result
	// Phase is one measured step of a launch.
	Phase = backend.Phase
	// Driver is one backend's way of running a plan: Native here, compat.Driver
	// for bubblewrap.
	Driver = backend.Driver
)

// signalCatch is opts.Signals as this backend's registration; nil: none.
func signalCatch(opts Options) *SignalCatch {
	sc, _ := opts.Signals.(*SignalCatch)
	return sc
}

// Names of the launcher-side phases every launch reports (the init's own are named
// after their step).
const (
	PhaseClone = "clone+idmap" // from the start of the launch to the init running
	PhaseSetup = "total-setup" // from the start of the launch to the command started
	// PhaseGate is the raw init's wait, its sandbox built, for Options.BeforeExec.
	PhaseGate = "wait for the launcher"
)

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
