package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"

	"github.com/agentbox/agentbox/backend"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/termsafe"
	"github.com/agentbox/agentbox/internal/trustedexec"
	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/nsinit"
)

// A Launcher starts sandboxes from a small helper process instead of the calling
// program. Where the init is started by os/exec (other architectures than amd64, see
// nsinit), forking with a new user namespace copies the forking process's page tables,
// so a program with a large heap pays for its size on every launch; the helper,
// started early while the program is small, pays for its own few megabytes instead.
// On amd64 the init is vforked, which copies no page tables, so Run is the faster
// way at any heap size.
//
// The helper is the program itself re-executed (it must call Init first in main) or
// Binary, any program that does. It dies with the thread that started it.
//
//	program                                   helper (Init: launcher role)
//	   |-- socketpair end (SCM_RIGHTS) ------->|  one per Run, on fd 3
//	   |== request: plan, env, init binary ===>|  + stdin/stdout/stderr (SCM_RIGHTS)
//	   |                                       |  nsinit.Run
//	   |<== reply: status, phases, or error ===|
type Launcher struct {
	ctl *os.File // the program's end of the helper's control socket
	cmd *exec.Cmd
	// uid and gid are the program's when it started the helper, which keeps them:
	// its sandboxes get them (each backend maps its own ids to themselves).
	uid, gid int
	mu       sync.Mutex
	done     bool
}

// envLauncher marks the helper process.
const envLauncher = "_AGENTBOX_SANDBOX_LAUNCHER"

// launcherArg0 is the helper's argv[0], so ps shows what it is.
const launcherArg0 = "agentbox-launcher"

// NewLauncher starts the helper: binary, or the running program when binary is
// empty (which must then have called Init). A binary is refused as
// Options.InitBinary is: one a session could replace.
func NewLauncher(binary string) (*Launcher, error) {
	// A named binary is executed through the file checked, never its path again;
	// each launch hands the helper the file it checked for its init
	// (request.InitFile).
	var file *os.File
	if binary == "" {
		if !initCalled.Load() {
			return nil, ErrNoInit
		}
		binary = "/proc/self/exe"
	} else {
		f, err := openInitBinary(binary)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		file = f
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("sandbox: launcher socket: %w", err)
	}
	ctl := os.NewFile(uintptr(fds[0]), "launcher")
	child := os.NewFile(uintptr(fds[1]), "launcher-helper")
	defer child.Close()
	cmd, done, err := helperCommand(binary, file, child)
	if err == nil {
		err = cmd.Start()
		done()
	}
	if err != nil {
		ctl.Close()
		return nil, fmt.Errorf("sandbox: start launcher %s: %w", termsafe.Quote(binary), err)
	}
	return &Launcher{ctl: ctl, cmd: cmd, uid: os.Getuid(), gid: os.Getgid()}, nil
}

// helperCommand is the helper's command: binary, or the file open for it (nil:
// binary is /proc/self/exe), with child as its descriptor 3. For a file, its
// standard streams are /dev/null opened here, so that the file's descriptor can
// be placed clear of every one the child gets (trustedexec.Above). done closes
// what it opened, once the command started.
func helperCommand(binary string, file, child *os.File) (cmd *exec.Cmd, done func(), err error) {
	cmd = exec.Command(binary)
	cmd.Args = []string{launcherArg0}
	cmd.Env = append(os.Environ(), envLauncher+"=1")
	cmd.ExtraFiles = []*os.File{child}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if file == nil {
		return cmd, func() {}, nil
	}
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return nil, nil, err
	}
	hi, err := trustedexec.Above(file, []*os.File{null, null, null, child})
	if err != nil {
		null.Close()
		return nil, nil, err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = null, null, null
	cmd.Path = trustedexec.ExecPath(int(hi.Fd()))
	return cmd, func() { hi.Close(); null.Close() }, nil
}

// Close stops the helper and waits for it. Sandboxes it started die with it.
func (l *Launcher) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done {
		return nil
	}
	l.done = true
	l.ctl.Close() // the helper exits at EOF
	_ = l.cmd.Wait()
	return nil
}

// request and reply are the frames on one Run's connection.
type request struct {
	Plan       mounts.Plan `json:"plan"`
	Env        []string    `json:"env"`
	InitBinary string      `json:"init_binary,omitempty"`
	Streams    [3]bool     `json:"streams"`             // which of stdin, stdout, stderr follow as fds
	InitFile   bool        `json:"init_file,omitempty"` // the checked InitBinary follows last
	Cgroup     bool        `json:"cgroup"`              // the session's cgroup follows them as an fd
}

type reply struct {
	Status int     `json:"status"`
	Phases []Phase `json:"phases,omitempty"`
	Step   string  `json:"step,omitempty"`   // a *SetupError
	Reason string  `json:"reason,omitempty"` // with Step; alone: any other error
}

// maxFrame bounds one frame; a plan with a large environment fits many times over.
const maxFrame = 4 << 20

// Run is the package-level Run, launched by the helper: the session's preparation,
// audit and record run in the calling program, the plan in the helper. Signals sent
// to the calling program are not forwarded; the helper passes its own on. The
// session's cgroup (and its limits) travels to the helper as a descriptor, and the
// helper clones the init into it (backend.Options.Cgroup).
func (l *Launcher) Run(opts Options) (Result, error) {
	if len(opts.HostPorts) > 0 || len(opts.Publish) > 0 {
		return Result{}, errors.New("sandbox: a Launcher cannot serve HostPorts or Publish (its helper hands the launcher no sockets of the init): use sandbox.Run")
	}
	// The session is prepared here, for this process's ids (a root session's
	// cover, mounts.IsHostRoot; the user's state and cache), and its command
	// gets the helper's: a program that dropped root after NewLauncher would run
	// a host-root command under a plan made for a user.
	if uid, gid := os.Getuid(), os.Getgid(); uid != l.uid || gid != l.gid {
		return Result{}, fmt.Errorf("sandbox: this Launcher's helper runs as uid %d gid %d, and this program now as uid %d gid %d: its sandboxes would get the helper's ids under a plan made for these; call NewLauncher again after changing ids", l.uid, l.gid, uid, gid)
	}
	return run(opts, launcherDriver{l})
}

// launcherDriver runs a plan in the Launcher's helper.
type launcherDriver struct{ l *Launcher }

// Run implements backend.Driver. BeforeExec runs before the plan is handed over, as
// for a Go init (backend.Options.BeforeExec); Cgroup goes to the helper; AfterStart
// is not called (the init starts in the cgroup) and Listener is not offered (the Go
// API has no --allow-net).
func (d launcherDriver) Run(plan mounts.Plan, o backend.Options) (backend.Result, error) {
	grantedToSessions(plan.Writable()) // Prestart's spares must not run what it could write
	if o.BeforeExec != nil {
		if err := o.BeforeExec(); err != nil {
			return backend.Result{}, err
		}
	}
	return d.l.launch(plan, o)
}

// launch hands plan and the command's streams to the helper and waits for its reply.
func (l *Launcher) launch(plan mounts.Plan, opts backend.Options) (backend.Result, error) {
	env := opts.Env
	if env == nil {
		env = os.Environ()
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return backend.Result{}, fmt.Errorf("sandbox: launcher connection: %w", err)
	}
	defer unix.Close(fds[0])
	err = func() error {
		defer unix.Close(fds[1])
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.done {
			return errors.New("sandbox: launcher closed")
		}
		return unix.Sendmsg(int(l.ctl.Fd()), []byte{0}, unix.UnixRights(fds[1]), nil, 0)
	}()
	if err != nil {
		return backend.Result{}, fmt.Errorf("sandbox: hand connection to launcher: %w", err)
	}

	req := request{Plan: plan, Env: env, InitBinary: opts.InitBinary}
	var rights []int
	for i, f := range []*os.File{opts.Stdin, opts.Stdout, opts.Stderr} {
		if f != nil {
			req.Streams[i] = true
			rights = append(rights, int(f.Fd()))
		}
	}
	if opts.Cgroup != nil {
		req.Cgroup = true
		rights = append(rights, int(opts.Cgroup.Fd()))
	}
	if opts.InitFile != nil {
		req.InitFile = true
		rights = append(rights, int(opts.InitFile.Fd()))
	}
	b, err := json.Marshal(&req)
	if err != nil {
		return backend.Result{}, fmt.Errorf("sandbox: encode request: %w", err)
	}
	var oob []byte
	if len(rights) > 0 {
		oob = unix.UnixRights(rights...)
	}
	if err := unix.Sendmsg(fds[0], b, oob, nil, 0); err != nil {
		return backend.Result{}, fmt.Errorf("sandbox: send request to launcher: %w", err)
	}
	buf, err := recvFrame(fds[0])
	if err != nil || len(buf) == 0 {
		return backend.Result{}, fmt.Errorf("sandbox: launcher gave no reply (%v)", err)
	}
	n := len(buf)
	var rep reply
	if err := json.Unmarshal(buf[:n], &rep); err != nil {
		return backend.Result{}, fmt.Errorf("sandbox: launcher reply: %w", err)
	}
	res := backend.Result{Status: rep.Status, Phases: rep.Phases}
	switch {
	case rep.Step != "":
		return res, &SetupError{Step: rep.Step, Reason: rep.Reason}
	case rep.Reason != "":
		return res, errors.New(rep.Reason)
	}
	return res, nil
}

// frameSize is the size of the next frame on a SOCK_SEQPACKET socket, without
// consuming it (MSG_TRUNC makes recv return the real length), bounded by maxFrame.
func frameSize(fd int) (int, error) {
	var b [1]byte
	for {
		n, _, err := unix.Recvfrom(fd, b[:], unix.MSG_PEEK|unix.MSG_TRUNC)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, err
		}
		if n > maxFrame {
			return 0, fmt.Errorf("frame of %d bytes exceeds %d", n, maxFrame)
		}
		return n, nil
	}
}

// recvFrame reads one whole frame (no descriptors).
func recvFrame(fd int) ([]byte, error) {
	size, err := frameSize(fd)
	if err != nil || size == 0 {
		return nil, err
	}
	buf := make([]byte, size)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	return buf[:n], err
}

func isLauncher() bool {
	return os.Getenv(envLauncher) != "" && len(os.Args) > 0 && os.Args[0] == launcherArg0
}

// serveLauncher is the helper: it accepts one connection per Run on fd 3 and runs
// each in its own goroutine, until the program closes its end.
func serveLauncher() int {
	os.Unsetenv(envLauncher)
	ctl := 3
	unix.CloseOnExec(ctl)
	oob := make([]byte, unix.CmsgSpace(4))
	for {
		var b [1]byte
		n, oobn, _, _, err := unix.Recvmsg(ctl, b[:], oob, unix.MSG_CMSG_CLOEXEC)
		if err == unix.EINTR {
			continue
		}
		if err != nil || (n == 0 && oobn == 0) {
			return 0
		}
		fds := rightsOf(oob[:oobn])
		if len(fds) != 1 {
			closeAll(fds)
			continue
		}
		go serveOne(fds[0])
	}
}

func serveOne(conn int) {
	defer unix.Close(conn)
	size, err := frameSize(conn)
	if err != nil || size == 0 {
		return
	}
	buf := make([]byte, size)
	oob := make([]byte, unix.CmsgSpace(5*4))
	n, oobn, _, _, err := unix.Recvmsg(conn, buf, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil || n == 0 {
		return
	}
	var files []*os.File
	for _, fd := range rightsOf(oob[:oobn]) {
		f := os.NewFile(uintptr(fd), "stream")
		files = append(files, f)
		defer f.Close()
	}
	var req request
	var rep reply
	if err := json.Unmarshal(buf[:n], &req); err != nil {
		rep.Reason = "launcher: bad request: " + err.Error()
	} else if initFile, files, ok := lastOf(req.InitFile, files); !ok {
		rep.Reason = "launcher: request names an init binary it did not send"
	} else if cgroup, files, ok := lastOf(req.Cgroup, files); !ok {
		rep.Reason = "launcher: request names a cgroup it did not send"
	} else if stdio, ok := streams(req.Streams, files); !ok {
		rep.Reason = "launcher: request names streams it did not send"
	} else {
		res, err := nsinit.Run(req.Plan, backend.Options{Stdio: stdio, Env: req.Env, InitBinary: req.InitBinary, InitFile: initFile, Cgroup: cgroup})
		rep.Status, rep.Phases = res.Status, res.Phases
		var se *nsinit.SetupError
		switch {
		case errors.As(err, &se):
			rep.Step, rep.Reason = se.Step, se.Reason
		case err != nil:
			rep.Reason = err.Error()
		}
	}
	b, err := json.Marshal(&rep)
	if err == nil {
		_ = unix.Sendmsg(conn, b, nil, nil, 0)
	}
}

// lastOf takes the last descriptor received off got when the request names it
// (the init binary, then the session's cgroup: the reverse of their order sent).
func lastOf(named bool, got []*os.File) (*os.File, []*os.File, bool) {
	if !named {
		return nil, got, true
	}
	if len(got) == 0 {
		return nil, got, false
	}
	return got[len(got)-1], got[:len(got)-1], true
}

// streams pairs the received descriptors with the streams the request names.
func streams(named [3]bool, got []*os.File) (backend.Stdio, bool) {
	var files [3]*os.File
	next := 0
	for i, on := range named {
		if !on {
			continue
		}
		if next >= len(got) {
			return backend.Stdio{}, false
		}
		files[i] = got[next]
		next++
	}
	return backend.Stdio{Stdin: files[0], Stdout: files[1], Stderr: files[2]}, next == len(got)
}

func rightsOf(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		r, err := unix.ParseUnixRights(&m)
		if err == nil {
			fds = append(fds, r...)
		}
	}
	return fds
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
