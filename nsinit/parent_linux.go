package nsinit

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/nsinit/goinit"
	"github.com/agentbox/agentbox/nsinit/program"
	"github.com/agentbox/agentbox/nsinit/protocol"
)

// controlFd is where the native init finds its end of the control socket
// (ExtraFiles[0]); under bwrap it is another (see InitCommand).
const controlFd = program.ControlFd

// exitSetup is the init's status when setup failed before the command started.
const exitSetup = protocol.ExitSetup

// Forwarded are the signals the launcher passes to the init, and the init to the
// command.
var Forwarded = []os.Signal{
	syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT,
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH,
}

// StepInitEnded is the SetupError step of an init (or bwrap) that ended without
// reporting: Status is how it ended.
const StepInitEnded = "init"

// endedEarly is the SetupError of an init that ended, as e says, before the command
// started.
func endedEarly(e exit) *SetupError {
	return &SetupError{Step: StepInitEnded, Reason: "exited before starting the command (" + e.String() + ")", Status: e.status()}
}

// StepHandPlan is the SetupError step of a plan the init never took: the init had
// died (a prestarted one may have, while waiting).
const StepHandPlan = "hand plan to init"

// SetupError is a failure of agentbox before the command started: it names the step
// and, where there is one, the path.
type SetupError struct {
	Step   string
	Reason string
	Status int // the init's (or bwrap's) exit status when it ended without starting the command
}

func (e *SetupError) Error() string { return e.Step + ": " + e.Reason }

// Run starts the init in new namespaces, hands it plan, and waits for the session to
// end. A *SetupError (or any error) means the command never started.
func Run(plan mounts.Plan, opts Options) (Result, error) {
	// The raw init has no socket steps (nor the plan's Env): the Go init runs those.
	if opts.RawInit && !plan.Served() && len(plan.Env) == 0 {
		if res, err, ok := runRaw(plan, opts); ok {
			return res, err
		}
	}
	// Pdeathsig is tied to the thread that forks: keep this goroutine on one
	// thread until the init is gone, so the init dies exactly when the launcher does.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	ctl, child, err := ControlSocket()
	if err != nil {
		return Result{}, err
	}
	defer ctl.Close()
	exe, err := openInit(opts.InitBinary, opts.InitFile)
	if err != nil {
		child.Close()
		return Result{}, err
	}
	start := func(bool) (*process, error) {
		defer child.Close()
		defer exe.close()
		return startInit(exe, initEnv(controlFd, initMapsOwnIDs), cloneFlags(plan), opts.Stdio, child, cgroupFd(opts))
	}
	return Supervise(Launch{Start: start, Ctl: ctl, Plan: plan}, opts)
}

// ControlSocket returns the two ends of a launcher–init control socket: the
// launcher's, and the child's, to be passed to the init.
func ControlSocket() (ctl, child *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("control socket: %w", err)
	}
	// The launcher's end goes to Go's poller, so that reading it parks a goroutine,
	// not a thread; the child's end stays blocking.
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, nil, fmt.Errorf("control socket: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "control"), os.NewFile(uintptr(fds[1]), "control-init"), nil
}

// InitCommand prepares binary to run as the init, finding its control socket at fd.
// The init's own environment is minimal; the command's travels in the plan message,
// untouched by the init's Go runtime settings (GOMAXPROCS=1, GOGC=off: a short-lived
// supervisor needs neither parallel GC nor a second P).
func InitCommand(binary string, fd int, stdio Stdio) *exec.Cmd {
	cmd := exec.Command(binary)
	cmd.Args = []string{protocol.InitArgv0}
	cmd.Env = initEnv(fd, false)
	// A nil *os.File in an io.Reader would not read as "no stream": assign only
	// what is set, so unset streams become /dev/null.
	if stdio.Stdin != nil {
		cmd.Stdin = stdio.Stdin
	}
	if stdio.Stdout != nil {
		cmd.Stdout = stdio.Stdout
	}
	if stdio.Stderr != nil {
		cmd.Stderr = stdio.Stderr
	}
	return cmd
}

// initEnv is the init's own environment: its control descriptor, its Go runtime
// settings, and, when it must map its own ids (native, see startInit), the
// caller's uid and gid.
func initEnv(ctlFd int, ownMaps bool) []string {
	// containermaxprocs=0: the runtime reads the cgroup's CPU limit once and closes
	// it, instead of holding the host's cgroup files open in PID 1 for its updates.
	env := []string{fmt.Sprintf("%s=%d", protocol.EnvRole, ctlFd), "GOMAXPROCS=1", "GOGC=off", "GODEBUG=containermaxprocs=0"}
	if ownMaps {
		env = append(env, fmt.Sprintf("%s=%d:%d", protocol.EnvIDMap, os.Getuid(), os.Getgid()))
	}
	if v := os.Getenv(program.EnvFallbacks); v != "" {
		env = append(env, program.EnvFallbacks+"="+v)
	}
	return env
}

// Launch is one start of the init.
type Launch struct {
	Cmd *exec.Cmd // starts the init through bwrap; nil when Start is set
	// Start starts the init itself (the native backend's vfork) and returns it;
	// fg says whether the command will take the terminal's foreground.
	Start func(fg bool) (*process, error)
	Ctl   *os.File // the launcher's end of the control socket
	Plan  mounts.Plan
	// Nested: the namespaces and mounts are already built (by bwrap); the init
	// only supervises the command and checks that no privilege is left.
	Nested bool
	// Prestarted: the init (returned by Start) was started ahead of this session
	// (Prestart) and waits for its plan; the command's streams are passed with it.
	Prestarted bool
	// StreamsWithPlan: the init was started with other standard streams than the
	// command's (bwrap's stderr is a pipe the launcher escapes: compat), and the
	// command's travel with the plan, as a prestarted init's do.
	StreamsWithPlan bool
	// conn is how to talk to the init; nil: JSON frames on Ctl.
	conn initConn
	// gated: the init waits, its sandbox built, for a go (rawConn.sendGo) before it
	// starts the command, and Options.BeforeExec runs meanwhile.
	gated bool
}

// initConn is the launcher's side of the control socket: the Go init's JSON frames
// (frameConn), or the raw init's records.
type initConn interface {
	plan(m *protocol.Message, fds ...*os.File) error
	read() (*protocol.Message, error)
	write(m *protocol.Message) error
}

// goSender is a conn whose init can wait for a go (Launch.gated).
type goSender interface{ sendGo() error }

type frameConn struct{ ctl *os.File }

func (c frameConn) plan(m *protocol.Message, fds ...*os.File) error {
	return protocol.Write(c.ctl, m, fds...)
}
func (c frameConn) read() (*protocol.Message, error) { return protocol.ReadPolled(c.ctl) }
func (c frameConn) write(m *protocol.Message) error  { return protocol.Write(c.ctl, m) }

// withEnv is env with extra set, replacing variables of the same name.
func withEnv(env, extra []string) []string {
	if len(extra) == 0 {
		return env
	}
	names := map[string]bool{}
	for _, kv := range extra {
		n, _, _ := strings.Cut(kv, "=")
		names[n] = true
	}
	out := make([]string, 0, len(env)+len(extra))
	for _, kv := range env {
		if n, _, _ := strings.Cut(kv, "="); !names[n] {
			out = append(out, kv)
		}
	}
	return append(out, extra...)
}

// initCaps are the capabilities (in the new user namespace only) the init keeps for
// setup. Beyond mounting, overlayfs records its mounter's credentials and uses them
// for every later copy-up and whiteout, so the mounter needs the file capabilities a
// root user would have there (chown, DAC, fowner, mknod), as under bubblewrap.
var initCaps = []uintptr{
	unix.CAP_CHOWN, unix.CAP_DAC_OVERRIDE, unix.CAP_DAC_READ_SEARCH, unix.CAP_FOWNER,
	unix.CAP_FSETID, unix.CAP_KILL, unix.CAP_SETGID, unix.CAP_SETUID, unix.CAP_SETPCAP,
	unix.CAP_NET_ADMIN, unix.CAP_SYS_CHROOT, unix.CAP_SYS_ADMIN, unix.CAP_MKNOD,
	unix.CAP_SYS_RESOURCE, // the namespace's user limits (program.lowerUserLimits)
}

// cloneFlags are the namespaces of P5 for plan, in which the init is cloned, but
// for the cgroup namespace, which the init makes itself once it is in its
// session's cgroup (program.Compile). Beyond
// them the init gets (startInit) the caller's own uid and gid mapped to
// themselves, its own process group (so terminal signals reach the launcher once and
// are forwarded once), death with the launcher, and initCaps: it runs as the caller's
// uid, not 0, so execve would drop the capabilities it holds in its new user
// namespace; these survive as ambient capabilities for the setup, and the init drops
// all of them before it starts the command.
func cloneFlags(plan mounts.Plan) uintptr {
	flags := uintptr(unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID |
		unix.CLONE_NEWIPC | unix.CLONE_NEWUTS)
	if plan.Namespaces.Net {
		flags |= unix.CLONE_NEWNET
	}
	return flags
}

// startReason explains why the namespaces could not be created, with the usual fix.
func startReason(err error) string {
	switch {
	case errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EACCES):
		return err.Error() + " (unprivileged user namespaces may be disabled; run 'agentbox doctor')"
	case errors.Is(err, syscall.ENOSPC):
		return err.Error() + " (user.max_user_namespaces reached; run 'agentbox doctor')"
	case errors.Is(err, syscall.EINVAL):
		return err.Error() + " (a namespace type is missing from this kernel; run 'agentbox doctor')"
	}
	return err.Error()
}

func abort(proc *process, err error) error {
	proc.kill()
	proc.wait()
	return err
}

// startLaunch starts the init of l: through l.Start, or l.Cmd, whose ends of the
// init's descriptors (control socket, bwrap's) are the child's once it started.
func startLaunch(l Launch, fg bool) (*process, error) {
	if l.Start != nil {
		return l.Start(fg)
	}
	err := l.Cmd.Start()
	if err != nil && l.Cmd.SysProcAttr != nil && l.Cmd.SysProcAttr.UseCgroupFD && noCloneIntoCgroup(err) {
		// Before Linux 5.7: bwrap starts in the launcher's cgroup, its child is
		// moved into the session's (Options.AfterStart), and the cgroup namespace
		// bwrap made for it stays rooted above it (docs/security.md).
		l.Cmd = retryCommand(l.Cmd)
		err = l.Cmd.Start()
	}
	for _, f := range l.Cmd.ExtraFiles {
		f.Close()
	}
	if err != nil {
		return nil, err
	}
	return osProcess(l.Cmd.Process), nil
}

// isForeground reports whether f is a terminal whose foreground process group is
// ours: only then does the command take over the terminal.
func isForeground(f *os.File) bool {
	if f == nil {
		return false
	}
	pgrp, err := unix.IoctlGetInt(int(f.Fd()), unix.TIOCGPGRP)
	return err == nil && pgrp == unix.Getpgrp()
}

// restoreForeground gives the terminal back to the launcher's process group after
// the command held it, so messages printed afterwards are not stopped by SIGTTOU.
func restoreForeground(f *os.File, wasFg bool) {
	if wasFg {
		goinit.SetForeground(int(f.Fd()), unix.Getpgrp())
	}
}

// jobControl reports whether one of the standard streams is the launcher's
// controlling terminal, so that a shell with job control can resume the launcher
// once it stops itself.
func jobControl(files ...*os.File) bool { return controllingStream(files...) != nil }

// controllingStream is the first of files that is the launcher's controlling
// terminal; nil when none is.
func controllingStream(files ...*os.File) *os.File {
	for _, f := range files {
		ctty := false
		if f != nil && withFd(f, func(fd int) { ctty = goinit.IsControllingTerminal(fd) }) && ctty {
			return f
		}
	}
	return nil
}

// suspendSelf mirrors a stopped command to the caller's shell: the launcher stops
// itself, and when the shell resumes it (fg or bg) it tells the init, which gives the
// terminal back to the command when we are in the foreground and then continues it.
//
// The stop is sent to this thread, not to the process: kill(getpid(), SIGSTOP) lets
// the kernel hand the stop to another thread (the group leader) while this one
// returns and runs on, and it would tell the init to continue the command before the
// shell has even seen the job stop — with the terminal still the shell's, the command
// reads from the background and SIGTTIN stops it again ("Stopped" right after fg).
// A signal for the calling thread is taken before the system call returns, so the
// line after it runs only once the shell has continued us (docs/terminal.md).
//
// It returns whether the command was given the terminal's foreground (fg, not bg).
func suspendSelf(stdin *os.File, conn initConn) bool {
	runtime.LockOSThread()
	_ = unix.Tgkill(unix.Getpid(), unix.Gettid(), unix.SIGSTOP)
	runtime.UnlockOSThread()
	fg := isForeground(stdin)
	_ = conn.write(&protocol.Message{Type: protocol.MsgContinue, Foreground: fg})
	return fg
}

// IsInit reports whether this process is the re-executed Go init. main asks first,
// before anything else runs (goinit.IsInit).
func IsInit() bool { return goinit.IsInit() }

// Main is the Go init: PID 1 of the sandbox's PID namespace (goinit.Main). It never
// returns.
func Main() { goinit.Main() }

// LookPath finds name the way the Go init does before it starts the command (PATH
// searched as a shell does; a directory or a non-executable file refused), for
// --dry-run, which must refuse what the real launch would refuse. It looks in the
// caller's view of the filesystem.
func LookPath(name, pathEnv string) (string, error) { return goinit.LookPath(name, pathEnv) }

// CloseOnExecAbove2 marks every descriptor above stderr close-on-exec
// (goinit.CloseOnExecAbove2): the bwrap backend needs it before bwrap, which passes
// everything it inherits into the sandbox.
func CloseOnExecAbove2() { goinit.CloseOnExecAbove2() }
