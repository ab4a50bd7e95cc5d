package nsinit

import (
	"errors"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/nsinit/protocol"
)

// Supervise starts the init (l.Start or l.Cmd), hands it the plan, forwards signals,
// mirrors job control, and waits for the session to end. The status is the one the
// native init reports once nothing of the session runs, or else the exit status of
// the started process, which the init (or bwrap on its behalf) makes the command's.
func Supervise(l Launch, opts Options) (Result, error) {
	s := &supervisor{l: l, opts: opts, stdio: opts.Stdio, beforeExec: opts.BeforeExec}
	if s.beforeExec != nil && !l.gated {
		// This init cannot wait: the host work comes first.
		if err := s.beforeExec(); err != nil {
			return s.res, err
		}
		s.beforeExec = nil
	}
	s.t0 = time.Now()
	s.conn = l.conn
	if s.conn == nil {
		s.conn = frameConn{l.Ctl}
	}
	s.fg = isForeground(s.stdio.Stdin)
	// The terminal as it is now, to be put back before the launcher writes anything
	// after the session (terminal_linux.go).
	s.term = saveTerminal(s.stdio)
	s.streams = saveStreams(s.stdio)
	s.res.Terminal = s.term != nil
	// cmdFg: the command holds the terminal's foreground from the launcher, which
	// takes it back at the end. Not after the shell resumed the launcher in the
	// background (bg): the shell holds the terminal then, and must keep it.
	s.cmdFg = s.fg
	// Without a shell that can resume the launcher, a stopped command is continued
	// at once, and by the init: the launcher runs outside the session's cgroup, so a
	// command stopped in a loop would spend the launcher's CPU beyond --cpus.
	s.ctty = controllingStream(s.stdio.Stdin, s.stdio.Stdout, s.stdio.Stderr)
	s.cont = s.ctty == nil
	// The group that holds the terminal now, the first the foreground goes back to
	// should the session leave it to an empty group (reclaimEmptyForeground).
	s.launchFg = foregroundGroup(s.ctty)
	if c, ok := s.conn.(interface{ continueStops(bool) }); ok {
		c.continueStops(s.cont) // the raw init reads it from its arena
	}

	// Signals are caught before the command can exist, so none is lost in between:
	// before the init exists, or, with BeforeExec, before the init may start it.
	s.caught = signalCatch(opts)
	defer s.stopSignals()
	// With the raw init and a SignalCatch, the signal handler itself writes each
	// signal to the init as a record: only once the launcher has sent its last go
	// record, for which one sent before it would pass.
	s.rawCtl = rawControl(s.conn)
	s.records = s.rawCtl != nil && s.caught != nil
	if s.beforeExec == nil && !s.records {
		s.catchSignals()
	}

	var stdioFds []*os.File
	if l.Prestarted || l.StreamsWithPlan {
		// The init exists already, with /dev/null for stdio, or was started with a
		// stderr the launcher reads: this session's streams travel with the plan.
		files, closeAll, err := stdioFiles(s.stdio)
		if err != nil {
			return s.res, err
		}
		defer closeAll()
		stdioFds = files
	}
	if err := s.start(); err != nil {
		return s.res, err
	}
	if err := s.handPlan(stdioFds); err != nil {
		return s.res, err
	}
	return s.wait()
}

// supervisor is one Supervise: the launch, and what its steps share.
type supervisor struct {
	l          Launch
	opts       Options
	stdio      Stdio
	conn       initConn
	beforeExec func() error // nil once run, or when the init cannot wait for it
	res        Result

	t0, tStarted time.Time // the launch's start, and the init's
	fg, cmdFg    bool      // the launcher's foreground at the start; the command's now
	cont         bool      // the init continues a stopped command (protocol.Message.Continue)
	ctty         *os.File  // the standard stream that is the launcher's controlling terminal; nil: none
	launchFg     int       // ctty's foreground group at the start; 0: none
	term         *terminalState
	streams      *streamState

	sigs    <-chan os.Signal // the signals to forward as messages
	own     chan os.Signal   // os/signal's registration when there is no SignalCatch
	caught  *SignalCatch
	rawCtl  *os.File // the raw init's control socket, nil for the Go init
	records bool     // the signal handler writes signals to the raw init itself

	proc    *process
	started bool // the init reported the command started
}

// catchSignals starts taking the Forwarded signals, to pass them on as messages.
func (s *supervisor) catchSignals() {
	if s.caught != nil {
		s.sigs = s.caught.signals()
		return
	}
	s.own = make(chan os.Signal, 16)
	signal.Notify(s.own, Forwarded...)
	s.sigs = s.own
}

// takeOverAsRecords hands the signals to the SignalCatch's handler, which writes
// them to the raw init; where it cannot, they come as messages.
func (s *supervisor) takeOverAsRecords() {
	if !s.caught.records(s.rawCtl) {
		s.sigs = s.caught.signals()
	}
}

// stopSignals ends the launch's catching of signals, as Supervise returns.
func (s *supervisor) stopSignals() {
	if s.own != nil {
		signal.Stop(s.own)
	}
	if s.caught != nil {
		s.caught.launchOver()
	}
}

// giveBack returns the terminal, its foreground and its modes, and the standard
// streams as they were, to the launcher.
func (s *supervisor) giveBack() {
	restoreForeground(s.stdio.Stdin, s.cmdFg)
	reclaimEmptyForeground(s.ctty, s.launchFg)
	s.term.restore()
	s.streams.restore()
}

// start starts the init and runs Options.AfterStart on it.
func (s *supervisor) start() error {
	proc, err := startLaunch(s.l, s.fg)
	if err != nil {
		return &SetupError{Step: "create namespaces", Reason: startReason(err)}
	}
	s.proc = proc
	s.res.InitPID = proc.Pid
	if s.opts.AfterStart != nil {
		if err := s.opts.AfterStart(proc.Pid); err != nil {
			return abort(proc, err)
		}
	}
	s.tStarted = time.Now()
	if s.beforeExec == nil && s.records {
		s.takeOverAsRecords()
	}
	return nil
}

// handPlan sends the init its plan and, for a gated init, runs BeforeExec before
// the go that lets it start the command.
func (s *supervisor) handPlan(stdioFds []*os.File) error {
	l, proc := s.l, s.proc
	env := withEnv(s.opts.Environ(), l.Plan.Env)
	plan := l.Plan
	if l.Nested {
		// Built by bwrap: the init needs the command and its dir, and the devices,
		// whose binds it checks (program.Compile).
		var devices []mounts.Op
		for _, op := range plan.Ops {
			if op.Kind == mounts.Device {
				devices = append(devices, op)
			}
		}
		plan.Ops = devices
	}
	err := s.conn.plan(&protocol.Message{Type: protocol.MsgPlan, Plan: &plan, Env: env, Foreground: s.fg, Nested: l.Nested, Continue: s.cont}, stdioFds...)
	if err != nil {
		if !l.Prestarted && (errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)) {
			// The other end is closed: the init (or bwrap) has ended already. Say how,
			// as when it ends before reporting. (A prestarted spare that died while
			// waiting keeps StepHandPlan: its caller launches afresh.)
			proc.kill()
			return endedEarly(proc.wait())
		}
		return abort(proc, &SetupError{Step: StepHandPlan, Reason: err.Error()})
	}

	if s.beforeExec != nil {
		if err := s.beforeExec(); err != nil {
			return abort(proc, err)
		}
		if !s.records {
			s.catchSignals()
		}
		// A failed write means the init is gone: its report (or its exit) says why.
		_ = s.conn.(goSender).sendGo()
		if s.records {
			s.takeOverAsRecords()
		}
	}
	return nil
}

// wait forwards signals and socket requests to the init and follows its messages
// until the session ends.
func (s *supervisor) wait() (Result, error) {
	conn, proc, res := s.conn, s.proc, &s.res
	msgs := make(chan *protocol.Message, 4)
	go func() {
		defer close(msgs)
		for {
			m, err := conn.read()
			if err != nil {
				return
			}
			msgs <- m
		}
	}()

	// The init's exit is waited for once its end of the socket is closed (it has
	// exited, or is exiting): a waiter from the start would hold a thread blocked in
	// wait4 for the whole session, and a session that ends well returns before that.
	var waited chan exit

	res.Phases = []Phase{{Name: PhaseClone, Dur: s.tStarted.Sub(s.t0)}}
	sockets := newSocketBroker()
	defer sockets.end()
	for {
		select {
		case ch := <-sockets.reqs:
			sockets.ask(conn, ch)
		case sig := <-s.sigs:
			// The init passes it on to the command. A message, not a signal to the
			// init: PID 1 then needs no signal handler of its own (os/signal's
			// set-up costs the init a thread hand-off per signal).
			_ = conn.write(&protocol.Message{Type: protocol.MsgSignal, Signal: int(sig.(syscall.Signal))})
		case m, ok := <-msgs:
			if !ok {
				msgs = nil // EOF: the init is exiting; its status follows
				waited = make(chan exit, 1)
				go func() { waited <- proc.wait() }()
				continue
			}
			if done, err := s.message(m, sockets, waited == nil); done {
				return *res, err
			}
		case st := <-waited:
			// Only after the socket's end: every frame the init sent was read.
			s.giveBack()
			if !s.started {
				return *res, endedEarly(st)
			}
			res.Status = st.status()
			return *res, nil
		}
	}
}

// message acts on one message of the init; done: the session is over, with err.
// reap: nobody waits for the init yet.
func (s *supervisor) message(m *protocol.Message, sockets *socketBroker, reap bool) (done bool, err error) {
	res := &s.res
	if m.Type != protocol.MsgListener && m.Type != protocol.MsgSocket {
		closeFds(m.Fds) // only those two frames carry descriptors the launcher takes
	}
	switch m.Type {
	case protocol.MsgStarted:
		s.started = true
		res.Phases = append(res.Phases, m.Phases...)
		res.Phases = append(res.Phases, Phase{Name: PhaseSetup, Dur: time.Since(s.t0)})
		if s.opts.Sockets != nil && len(s.l.Plan.Publish) > 0 {
			s.opts.Sockets(sockets.get) // only now: the init reads requests from here on
		}
	case protocol.MsgError:
		s.proc.wait() // it exits right after its report
		s.giveBack()
		return true, &SetupError{Step: m.Step, Reason: m.Reason}
	case protocol.MsgStopped:
		if jobControl(s.stdio.Stdin, s.stdio.Stdout, s.stdio.Stderr) {
			s.cmdFg = suspendSelf(s.stdio.Stdin, s.conn)
		} else {
			// No shell of the launcher's can resume it: a stopped launcher would
			// only take SIGKILL, which leaves the audit to a later launch, and
			// through the Go API it would be the caller's whole process. The
			// command goes on instead.
			_ = s.conn.write(&protocol.Message{Type: protocol.MsgContinue})
		}
	case protocol.MsgEnded:
		res.Signal, res.Left = syscall.Signal(m.Signal), m.Left
	case protocol.MsgListener:
		takeListeners(m, s.l.Plan, s.opts)
	case protocol.MsgSocket:
		sockets.answer(m)
	case protocol.MsgExited:
		if s.started {
			// Nothing of the session runs any more; the init's exit (the
			// kernel's teardown of its namespaces) is reaped in the
			// background. With the signal records, the raw init exits only
			// once the launcher has: whoever inherits it reaps it.
			if reap && !s.records {
				go s.proc.wait()
			}
			s.giveBack()
			res.Status, res.InitPeakRSSKiB = m.Status, m.PeakRSSKiB
			return true, nil
		}
	}
	return false, nil
}
