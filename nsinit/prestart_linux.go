package nsinit

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/mounts"
)

// Prestarted is an init started ahead of its session: cloned into its namespaces,
// its Go runtime up, waiting for a plan. What it takes off a launch is the clone and
// the init's start-up, about half of the native backend's time; what it costs is an
// idle process (and its namespaces) while it waits.
//
// It is bound to what was fixed at its start: the namespace set (the network
// namespace or not), the caller's uid and gid, the init binary, and the host's mount
// table, which its mount namespace copied then. Usable checks all of them; a spare
// that no longer fits is discarded, never used.
type Prestarted struct {
	proc       *process
	ctl        *os.File
	net        bool
	uid, gid   int
	initBinary string
	// mountinfo is the caller's /proc/self/mountinfo, open since the clone: the
	// kernel flags it (POLLPRI) when the mount table changes, after which the
	// spare's copy may miss a host mount. A raw fd: in an *os.File, Go's poller
	// would register it with epoll, and epoll's own poll consumes the flag.
	mountinfo int
	started   chan struct{} // closed once the clone returned; startErr says how
	startErr  error
	released  chan struct{}
	used      bool
	// raw: a raw init (PrestartRaw), blocked before its plan's system calls, with
	// its standard streams in place already.
	raw *rawProgram
}

// Prestart starts an init for a later Run, with the network namespace when net, from
// initBinary (empty: the running binary; file: initBinary opened and checked, as
// Options.InitFile). It keeps one OS thread (the init's parent, for Pdeathsig) until
// the spare is used or discarded.
func Prestart(net bool, initBinary string, file *os.File) (*Prestarted, error) {
	exe, err := openInit(initBinary, file)
	if err != nil {
		return nil, err
	}
	if initBinary == "" {
		initBinary = selfExe.path
	}
	p, err := prestart(&Prestarted{net: net, initBinary: initBinary}, true, func(child *os.File) (*process, error) {
		defer exe.close()
		return startInit(exe, initEnv(controlFd, initMapsOwnIDs), cloneFlags(mounts.Plan{Namespaces: mounts.Namespaces{Net: net}}), Stdio{}, child, -1)
	})
	if err != nil {
		return nil, err
	}
	if !p.ready() {
		return nil, p.startErr
	}
	return p, nil
}

// prestart starts p's init with start, which gets the init's end of the control
// socket, and returns at once: the clone runs meanwhile (ready waits for it).
//
// Pdeathsig is tied to the thread that clones. With keepThread, the clone's goroutine
// holds its thread until the spare is no longer needed and ends without unlocking, so
// the thread exits with it: what a Go program calling the API needs, whose goroutines
// may end locked threads of their own. Without it, the clone runs on whichever thread
// the goroutine has: the Go runtime ends a thread only for a goroutine that exits
// locked to it, which the CLI's launcher never does, so that thread lasts as long as
// the process. Holding a thread costs the launch two thread starts of the runtime's
// (the template thread, and one to take over the parked thread's P).
func prestart(p *Prestarted, keepThread bool, start func(child *os.File) (*process, error)) (*Prestarted, error) {
	mi, err := unix.Open("/proc/self/mountinfo", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("prestart: open /proc/self/mountinfo: %w", err)
	}
	p.uid, p.gid, p.mountinfo = os.Getuid(), os.Getgid(), mi
	p.started, p.released = make(chan struct{}), make(chan struct{})
	go func() {
		if keepThread {
			runtime.LockOSThread()
		}
		ctl, child, err := ControlSocket()
		if err == nil {
			var proc *process
			proc, err = start(child)
			child.Close()
			if err != nil {
				ctl.Close()
				err = &SetupError{Step: "create namespaces", Reason: startReason(err)}
			} else {
				p.proc, p.ctl = proc, ctl
			}
		}
		p.startErr = err
		close(p.started)
		if err == nil && keepThread {
			<-p.released
		}
	}()
	return p, nil
}

// ready waits for p's clone and reports whether it succeeded; a spare that failed to
// start is used up.
func (p *Prestarted) ready() bool {
	<-p.started
	if p.startErr != nil && !p.used {
		p.used = true
		unix.Close(p.mountinfo)
	}
	return p.startErr == nil
}

// Usable reports whether plan can run in p: same namespaces, same caller, same init
// binary, and no change to the host's mount table since p was started.
func (p *Prestarted) Usable(plan mounts.Plan, initBinary string) bool {
	if initBinary == "" {
		initBinary = "/proc/self/exe"
	}
	if p == nil || !p.ready() || p.used || plan.Namespaces.Net != p.net || os.Getuid() != p.uid || os.Getgid() != p.gid || (p.raw == nil && initBinary != p.initBinary) || (p.raw != nil && plan.Served()) {
		return false
	}
	fds := []unix.PollFd{{Fd: int32(p.mountinfo), Events: unix.POLLPRI}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n == 0
}

// PID is the spare init's process ID (in the caller's PID namespace).
func (p *Prestarted) PID() int {
	if !p.ready() {
		return 0
	}
	return p.proc.Pid
}

// Discard ends an unused spare and waits for it.
func (p *Prestarted) Discard() {
	if p == nil || !p.ready() || p.used {
		return
	}
	p.used = true
	p.proc.kill()
	p.proc.wait()
	p.release()
}

func (p *Prestarted) release() {
	p.ctl.Close()
	unix.Close(p.mountinfo)
	close(p.released)
}

// RunPrestarted runs plan in the spare p, as Run does in a fresh init. The caller
// checked Usable. p is used up either way.
func RunPrestarted(p *Prestarted, plan mounts.Plan, opts Options) (Result, error) {
	if !p.ready() || p.used {
		return Result{}, errors.New("prestarted init already used")
	}
	p.used = true
	defer p.release()
	if p.raw != nil {
		return runPrestartedRaw(p, plan, opts)
	}
	start := func(bool) (*process, error) { return p.proc, p.place(opts) }
	return Supervise(Launch{Start: start, Ctl: p.ctl, Plan: plan, Prestarted: true}, opts)
}

// place moves the spare, cloned before its session's cgroup existed, into
// Options.Cgroup before it gets its plan, whose first step makes its cgroup
// namespace (program.Compile): rooted there, not in the launcher's cgroup. A spare
// that cannot be moved is killed.
func (p *Prestarted) place(opts Options) error {
	fd := cgroupFd(opts)
	if fd < 0 {
		return nil
	}
	if err := placeInCgroup(fd, p.proc.Pid); err != nil {
		p.proc.kill()
		p.proc.wait()
		return err
	}
	return nil
}

// stdioFiles returns the three streams to hand a prestarted init, /dev/null for those
// not set, and a function closing what it opened.
func stdioFiles(s Stdio) ([]*os.File, func(), error) {
	var opened []*os.File
	closeAll := func() {
		for _, f := range opened {
			f.Close()
		}
	}
	files := []*os.File{s.Stdin, s.Stdout, s.Stderr}
	for i, f := range files {
		if f != nil {
			continue
		}
		null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("open %s: %w", os.DevNull, err)
		}
		opened = append(opened, null)
		files[i] = null
	}
	return files, closeAll, nil
}
