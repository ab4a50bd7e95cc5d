// Package backend is the seam between a session and the backend that runs its plan:
// the Driver interface and what crosses it (Options, Stdio, Result, Phase), and the
// Timer that times a launch's steps. The native backend (nsinit.Native) and the
// bubblewrap backend (compat.Driver) implement Driver; the session core (package
// session) and the Go API (package sandbox) launch through it and know nothing else
// of a backend.
//
// It holds types only and builds on any OS, so that the plan's packages (policy,
// mounts, compat) and the programs that show plans build everywhere too. It is not
// the place for a backend's own choices: those are fields of its driver.
package backend

import (
	"os"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/mounts"
)

// Driver is one backend's way of running a plan to the session's end.
type Driver interface {
	// Run builds the sandbox for plan, runs its command and waits for the session's
	// end. A setup error (nsinit.SetupError) means the command never started.
	Run(plan mounts.Plan, opts Options) (Result, error)
}

// Stdio are the command's standard streams; a nil one is /dev/null.
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
	// running binary (/proc/self/exe), whose main must call nsinit.IsInit and
	// nsinit.Main first.
	InitBinary string
	// InitFile is InitBinary opened and checked by the caller (open O_PATH is
	// enough); when set, the launch executes this very file, never InitBinary's
	// path again, which may lead to another file by then. The caller closes it.
	InitFile *os.File
	// Signals is a registration of the forwarded signals made ahead of the launch
	// (nsinit.CatchSignals, the only implementation); nil: the launch registers them
	// itself. Only the native backend takes it.
	Signals Signals
	// RawInit runs PID 1 without a Go runtime of its own, in a clone that shares the
	// launcher's memory, where the machine allows it (nsinit.RawInitAvailable);
	// elsewhere the re-executed init runs. It makes the launcher's process
	// non-dumpable: for a launcher that is a process of its own, the CLI. Native
	// backend only.
	RawInit bool
	// BeforeExec, when set, runs in the launcher once the launch has begun; the
	// command starts only after it returns nil, and an error ends the launch before
	// the command starts and is returned as it is. The raw init builds the sandbox
	// meanwhile, so host work the command must wait for but the sandbox does not
	// (the audit's baseline, the metadata snapshot) costs no time of its own; with
	// the Go init, and under bwrap, it runs before the init starts. Signals meanwhile
	// do what they would do uncaught: the launch takes them over after it.
	BeforeExec func() error
	// AfterStart, when set, runs in the launcher once the started process (the
	// init, or bwrap's child) exists, with its PID, and before the command can
	// start. An error ends the launch. It places the session in its own cgroup
	// (internal/leafcg), where every later process of the session is born.
	AfterStart func(pid int) error
	// Cgroup, when set, is the session's cgroup (internal/leafcg), open as a
	// directory: the started process (the init, or bwrap) is cloned into it
	// (CLONE_INTO_CGROUP), or moved into it before the init gets its plan where
	// the kernel cannot, so that the sandbox's cgroup namespace is rooted there.
	Cgroup *os.File
	// Listener, for a plan with a Proxy (--allow-net), gets the listening socket
	// the init created at plan.Proxy in the sandbox's network namespace, before the
	// command starts; the caller serves it and closes it. Called from the launch's
	// loop: it must not block. Nil: the socket is closed (nothing answers there).
	Listener func(*os.File)
	// HostPorts, for a plan with HostPorts (--host-port), gets the listening
	// sockets the init created at 127.0.0.1:Inside in the sandbox's network
	// namespace, one per plan.HostPorts in order, before the command starts; the
	// caller serves and closes them. Called from the launch's loop: it must not
	// block. Nil: they are closed.
	HostPorts func([]*os.File)
	// Sockets, for a plan with Publish (--publish), gets once the command has
	// started a function that returns a new, unconnected, non-blocking TCP socket
	// of the sandbox's network namespace, made by the init on request; it fails
	// once the session has ended. Called from the launch's loop: it must not
	// block (the function it gets may, and must not be called from there).
	Sockets func(get func() (*os.File, error))
}

// Environ is the command's environment: Env, or the caller's.
func (o Options) Environ() []string {
	if o.Env == nil {
		return os.Environ()
	}
	return o.Env
}

// Signals is a registration of the signals a launch forwards to the command, made
// ahead of the launch (nsinit.SignalCatch).
type Signals interface {
	// Stop ends the registration; the signals get their earlier action again.
	Stop()
}

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
	InitPID  int     // the init's PID in the launcher's namespace (native backend)
	// InitPeakRSSKiB is the init's own peak resident set (KiB), 0 when it did not
	// report one (under bwrap, or when it ended abnormally).
	InitPeakRSSKiB int64
	// Prestarted: the init was started ahead of the session (nsinit.Native.Spare).
	Prestarted bool
	// BackendVersion names what ran the sandbox when it is not agentbox itself
	// ("bubblewrap 0.12.0"), else "".
	BackendVersion string
}

// Phase is one measured step of a launch; the Go init reports its own in its
// started frame (nsinit/protocol), hence the JSON names.
type Phase struct {
	Name string        `json:"name"`
	Dur  time.Duration `json:"ns"`
}

// Timer records consecutive phases, each from the previous mark: the launcher's
// own steps around the backend, and the init's setup steps.
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
