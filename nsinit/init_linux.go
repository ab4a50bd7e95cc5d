package nsinit

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// IsInit reports whether this process is the re-executed init. main asks first,
// before anything else runs.
func IsInit() bool {
	return os.Getenv(envRole) != "" && len(os.Args) > 0 && os.Args[0] == initArgv0
}

// Main is the init: PID 1 of the sandbox's PID namespace. It never returns.
func Main() {
	// Every privileged step and the fork of the command happen on this one thread:
	// capabilities, no_new_privs and the seccomp filter are per thread, and the
	// command inherits them from the thread that forks it.
	runtime.LockOSThread()
	fd, err := strconv.Atoi(os.Getenv(envRole))
	if err != nil || fd < 3 {
		fmt.Fprintf(os.Stderr, "agentbox: init: bad control descriptor %q\n", os.Getenv(envRole))
		os.Exit(exitSetup)
	}
	ctl := os.NewFile(uintptr(fd), "control")
	if ids := os.Getenv(envIDMap); ids != "" {
		os.Unsetenv(envIDMap)
		if err := writeOwnIDMaps(ids); err != nil {
			os.Exit(reportSetup(ctl, "map uid and gid", err))
		}
	}
	os.Exit(initMain(ctl))
}

// writeOwnIDMaps maps the caller's uid and gid ("UID:GID") to themselves in the
// init's user namespace, as the only ids there. The init may: it maps its own
// effective ids and holds CAP_SETUID and CAP_SETGID in the namespace; setgroups is
// denied first, as the kernel requires for an unprivileged gid map — and as P5 wants:
// no dropping of supplementary groups to get around a group's denial.
func writeOwnIDMaps(ids string) error {
	uid, gid, ok := strings.Cut(ids, ":")
	if !ok {
		return fmt.Errorf("bad id map request %q", ids)
	}
	for _, w := range []struct{ file, data string }{
		{"/proc/self/setgroups", "deny"},
		{"/proc/self/uid_map", uid + " " + uid + " 1"},
		{"/proc/self/gid_map", gid + " " + gid + " 1"},
	} {
		if err := os.WriteFile(w.file, []byte(w.data), 0); err != nil {
			return err
		}
	}
	return nil
}

// initMain runs the numbered setup sequence, then supervises the command. Any setup
// failure is reported to the launcher as (step, reason) and ends the init with 125.
func initMain(ctl *os.File) int {
	t := NewTimer()

	// 1. Not dumpable: the command, same uid, must not ptrace us or open
	//    /proc/1/exe, /proc/1/mem or our fds (runc CVE-2019-5736).
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return reportSetup(ctl, "set init non-dumpable", err)
	}
	// 2. Every inherited fd becomes close-on-exec, the control socket included: the
	//    command gets 0, 1 and 2 and nothing else.
	CloseOnExecAbove2()
	os.Unsetenv(envRole)

	// 3. The plan, and with it, when this init was started ahead of its session,
	//    the command's standard streams.
	m, fds, err := readMsgFds(ctl)
	if err != nil || m.Type != msgPlan || m.Plan == nil || len(m.Plan.Command) == 0 {
		return reportSetup(ctl, "receive plan", fmt.Errorf("expected %q message: %v", msgPlan, err))
	}
	if err := installStdio(fds); err != nil {
		return reportSetup(ctl, "receive standard streams", err)
	}
	plan := *m.Plan
	t.Mark("init-start")

	// 4. Mounts, in plan order (under bwrap they are built already).
	if !m.Nested {
		if err := applyPlan(plan, t); err != nil {
			return reportSetup(ctl, "mount", err)
		}
	}
	// 5. Loopback up in a new network namespace.
	if plan.Namespaces.Net && !m.Nested {
		if err := loopbackUp(); err != nil {
			return reportSetup(ctl, "bring up loopback", err)
		}
	}
	// 5b. With --allow-net, the proxy's listening socket inside the new network
	//     namespace (under bwrap too, which brought loopback up), handed to the
	//     launcher, which serves it from outside: the only way out.
	if plan.Proxy != "" {
		if err := sendListener(ctl, plan.Proxy); err != nil {
			return reportSetup(ctl, "listen for the proxy on "+plan.Proxy, err)
		}
	}
	// 6. Working directory.
	if err := unix.Chdir(plan.Workdir); err != nil {
		return reportSetup(ctl, "chdir "+plan.Workdir, err)
	}
	// 7. Resolve the command in the sandbox's view, with the command's PATH.
	path, err := lookPath(plan.Command[0], getenv(m.Env, "PATH"))
	if err != nil {
		return reportSetup(ctl, "command "+plan.Command[0], err)
	}
	// 8. Drop every privilege before the fork (per thread: see Main). Under bwrap
	//    they are gone already; check that they are.
	drop := dropPrivileges
	if m.Nested {
		drop = checkUnprivileged
	}
	if err := drop(); err != nil {
		return reportSetup(ctl, "drop privileges", err)
	}
	if plan.ScopeAbstractUnix {
		if err := scopeAbstractUnix(); err != nil {
			return reportSetup(ctl, "scope abstract Unix sockets", err)
		}
	}
	t.Mark("drop-privileges")
	// 9. No signal handler from here on (pid1_linux.go): the kernel then drops every
	//    signal sent to PID 1 from inside the sandbox, which cannot end or crash it.
	if err := dropSignalHandlers(); err != nil {
		return reportSetup(ctl, "reset signal handlers", err)
	}

	// 10. The command: its own process group, the terminal's foreground when the
	//    launcher held it.
	pid, err := syscall.ForkExec(path, plan.Command, &syscall.ProcAttr{
		Dir:   plan.Workdir,
		Env:   m.Env,
		Files: []uintptr{0, 1, 2},
		Sys:   &syscall.SysProcAttr{Setpgid: true, Foreground: m.Foreground, Ctty: 0},
	})
	if err != nil {
		return reportSetup(ctl, "exec "+plan.Command[0], err)
	}
	t.Mark("exec-command")
	if err := writeMsg(ctl, &message{Type: msgStarted, Phases: t.Phases, PID: pid}); err != nil {
		// The launcher is gone; Pdeathsig will end us. Keep the command's fate
		// tied to ours.
		_ = unix.Kill(pid, unix.SIGKILL)
		return exitSetup
	}
	status, sig := supervise(ctl, pid)
	endSession(ctl, status, sig, m.Nested)
	return status
}

// endSession ends every process left in the sandbox and reaps it, and tells the
// launcher how the command ended (msgEnded: the signal that killed it, how many were
// left). Then, unless bwrap owns the namespaces (nested: the launcher waits for
// bwrap's exit), it tells the launcher the status: from then on nothing of the
// session runs, and the launcher need not wait for this process's own exit, in which
// the kernel tears down the namespaces and mounts (a few milliseconds it would
// otherwise add to every launch).
func endSession(ctl *os.File, status int, sig syscall.Signal, nested bool) {
	// Those that have exited already were not left running: reaped first.
	for {
		pid, err := retryEINTR(func() (int, error) { return unix.Wait4(-1, nil, unix.WNOHANG, nil) })
		if pid <= 0 || err != nil {
			break
		}
	}
	// PID 1 signalling -1 reaches every other process of its PID namespace; they are
	// all its children or reparented to it, so reaping until ECHILD sees them all gone.
	_ = unix.Kill(-1, unix.SIGKILL)
	left := 0
	for {
		_, err := retryEINTR(func() (int, error) { return unix.Wait4(-1, nil, 0, nil) })
		if err == unix.ECHILD {
			break
		}
		if err != nil {
			return // the launcher then learns the status from our exit, as before
		}
		left++
	}
	_ = writeMsg(ctl, &message{Type: msgEnded, Signal: int(sig), Left: left})
	if nested {
		return
	}
	// Our copies of the standard streams go too: a reader of the session's output
	// (a pipe into another program) sees its end now, not after our teardown.
	for fd := 0; fd <= 2; fd++ {
		_ = unix.Close(fd)
	}
	_ = writeMsg(ctl, &message{Type: msgExited, Status: status, PeakRSSKiB: peakRSS()})
}

// peakRSS is this process's VmHWM in KiB, 0 when unknown.
func peakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

// supervise is PID 1's loop: reap every child, pass the launcher's signals on to the
// command, mirror job control to the launcher, and return the command's status once
// it has exited, with the signal that killed it (0: it exited). The loop waits in
// wait4 itself, not for SIGCHLD: the init needs no signal handling (signals come as
// messages), and the command's end reaches it without a hand-off between threads.
func supervise(ctl *os.File, cmdPid int) (int, syscall.Signal) {
	go followLauncher(ctl, cmdPid)
	for {
		var ws unix.WaitStatus
		pid, err := retryEINTR(func() (int, error) { return unix.Wait4(-1, &ws, unix.WUNTRACED, nil) })
		if err != nil {
			// ECHILD: the command is gone without our seeing it end (cannot happen
			// while it is our child); report a setup-class failure, not success.
			return exitSetup, 0
		}
		if pid != cmdPid {
			continue // an orphan, reaped
		}
		switch {
		case ws.Exited():
			return ws.ExitStatus(), 0
		case ws.Signaled():
			return 128 + int(ws.Signal()), ws.Signal()
		case ws.Stopped():
			_ = writeMsg(ctl, &message{Type: msgStopped})
		}
	}
}

// followLauncher carries out what the launcher asks while the command runs: a signal
// for the command, or to continue it after job control stopped it (taking the
// terminal's foreground back when the launcher was resumed in the foreground).
func followLauncher(ctl *os.File, cmdPid int) {
	for {
		m, err := readMsg(ctl)
		if err != nil {
			return
		}
		switch m.Type {
		case msgSignal:
			if m.Signal > 0 && m.Signal < 65 {
				_ = unix.Kill(cmdPid, syscall.Signal(m.Signal))
			}
		case msgContinue:
			if m.Foreground {
				setForeground(0, cmdPid)
			}
			_ = unix.Kill(-cmdPid, unix.SIGCONT)
		}
	}
}

// installStdio makes the descriptors that came with the plan (none, or exactly
// stdin, stdout and stderr) this process's 0, 1 and 2.
func installStdio(fds []int) error {
	defer func() {
		for _, fd := range fds {
			if fd > 2 {
				unix.Close(fd)
			}
		}
	}()
	if len(fds) == 0 {
		return nil
	}
	if len(fds) != 3 {
		return fmt.Errorf("got %d descriptors, want 3", len(fds))
	}
	for i, fd := range fds {
		if fd == i {
			// Received onto a free low number (0–2 closed): keep it, inheritable.
			if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0); err != nil {
				return err
			}
			continue
		}
		if err := unix.Dup3(fd, i, 0); err != nil {
			return fmt.Errorf("dup3 %d to %d: %w", fd, i, err)
		}
	}
	return nil
}

// reportSetup sends the failing step to the launcher and returns the init's status.
func reportSetup(ctl *os.File, step string, err error) int {
	_ = writeMsg(ctl, &message{Type: msgError, Step: step, Reason: err.Error()})
	return exitSetup
}

// CloseOnExecAbove2 marks every descriptor above stderr close-on-exec, so that a
// program started next gets only stdio and what it is handed explicitly. Both the init
// (before the command) and the bwrap backend (before bwrap, which passes everything
// it inherits into the sandbox) need it. close_range needs Linux 5.11; older kernels
// get the /proc/self/fd walk.
func CloseOnExecAbove2() {
	if unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC) == nil {
		return
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			unix.CloseOnExec(fd)
		}
	}
}

func getenv(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], key+"="); ok {
			return v
		}
	}
	return ""
}

// lookPath finds name as a shell would, in the sandbox's view; a directory or a
// non-executable file is refused here so that the launcher can say so (exit 125).
func lookPath(name, pathEnv string) (string, error) {
	check := func(p string) error {
		fi, err := os.Stat(p)
		if err != nil {
			// An unreadable PATH entry is not a reason to stop looking, nor the
			// answer: like a shell, say "not found" when nothing else is found.
			return os.ErrNotExist
		}
		if fi.IsDir() {
			return errors.New("is a directory")
		}
		if fi.Mode()&0o111 == 0 {
			return errors.New("is not executable")
		}
		return unix.Access(p, unix.X_OK)
	}
	if strings.Contains(name, "/") {
		if err := check(name); err != nil {
			return "", notFound(err)
		}
		return name, nil
	}
	if pathEnv == "" {
		pathEnv = "/usr/local/bin:/usr/bin:/bin"
	}
	var first error
	for _, dir := range filepath.SplitList(pathEnv) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		err := check(p)
		if err == nil {
			return p, nil
		}
		if first == nil && !errors.Is(err, os.ErrNotExist) {
			first = err
		}
	}
	if first != nil {
		return "", notFound(first)
	}
	return "", errors.New("not found in PATH")
}

func notFound(err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return errors.New("not found")
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// sendListener creates a TCP socket listening on addr ("127.0.0.1:PORT") and sends
// it to the launcher (msgListener); the init keeps no copy.
func sendListener(ctl *os.File, addr string) error {
	host, port, err := splitAddr(addr)
	if err != nil {
		return err
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	f := os.NewFile(uintptr(fd), "proxy listener")
	defer f.Close()
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: port, Addr: host}); err != nil {
		return fmt.Errorf("bind: %w", err)
	}
	if err := unix.Listen(fd, 128); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	return writeMsg(ctl, &message{Type: msgListener}, f)
}

// splitAddr parses "A.B.C.D:PORT".
func splitAddr(addr string) ([4]byte, int, error) {
	var ip [4]byte
	h, p, ok := strings.Cut(addr, ":")
	port, err := strconv.Atoi(p)
	parts := strings.Split(h, ".")
	if !ok || err != nil || port <= 0 || port > 65535 || len(parts) != 4 {
		return ip, 0, fmt.Errorf("bad address %q", addr)
	}
	for i, x := range parts {
		n, err := strconv.Atoi(x)
		if err != nil || n < 0 || n > 255 {
			return ip, 0, fmt.Errorf("bad address %q", addr)
		}
		ip[i] = byte(n)
	}
	return ip, port, nil
}

// loopbackUp sets IFF_UP on lo, the only interface of a new network namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("SIOCGIFFLAGS lo: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("SIOCSIFFLAGS lo: %w", err)
	}
	return nil
}
