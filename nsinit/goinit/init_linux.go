// Package goinit is the Go init: the agentbox binary re-executed as PID 1 of the
// sandbox. It writes its own id maps when asked, receives the plan (package
// protocol), compiles and runs it (package program) — under bwrap only the part
// bwrap left — starts the command and supervises it until the session ends. The
// launcher's side is package nsinit; the raw init, which runs the same program
// without a Go runtime of its own, lives there too (it shares the launcher's memory).
package goinit

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

	"github.com/agentbox/agentbox/backend"
	"github.com/agentbox/agentbox/internal/eintr"
	"github.com/agentbox/agentbox/nsinit/program"
	"github.com/agentbox/agentbox/nsinit/protocol"
)

// IsInit reports whether this process is the re-executed init. main asks first,
// before anything else runs.
func IsInit() bool {
	return os.Getenv(protocol.EnvRole) != "" && len(os.Args) > 0 && os.Args[0] == protocol.InitArgv0
}

// Main is the init: PID 1 of the sandbox's PID namespace. It never returns.
func Main() {
	// Every privileged step and the fork of the command happen on this one thread:
	// capabilities, no_new_privs, Landlock and the seccomp filter are per thread,
	// and the command inherits them from the thread that forks it.
	runtime.LockOSThread()
	fd, err := strconv.Atoi(os.Getenv(protocol.EnvRole))
	if err != nil || fd < 3 {
		fmt.Fprintf(os.Stderr, "agentbox: init: bad control descriptor %q\n", os.Getenv(protocol.EnvRole))
		os.Exit(protocol.ExitSetup)
	}
	ctl := os.NewFile(uintptr(fd), "control")
	uid, gid, mapIDs := os.Getuid(), os.Getgid(), false
	if ids := os.Getenv(protocol.EnvIDMap); ids != "" {
		os.Unsetenv(protocol.EnvIDMap)
		if uid, gid, err = parseIDs(ids); err != nil {
			os.Exit(reportSetup(ctl, "map uid and gid", err))
		}
		mapIDs = true
	}
	os.Exit(initMain(ctl, uid, gid, mapIDs))
}

// parseIDs parses the launcher's "UID:GID" (protocol.EnvIDMap).
func parseIDs(ids string) (uid, gid int, err error) {
	u, g, ok := strings.Cut(ids, ":")
	uid, uerr := strconv.Atoi(u)
	gid, gerr := strconv.Atoi(g)
	if !ok || uerr != nil || gerr != nil || uid < 0 || gid < 0 {
		return 0, 0, fmt.Errorf("bad id map request %q", ids)
	}
	return uid, gid, nil
}

// initMain runs the numbered setup sequence, then supervises the command. Any setup
// failure is reported to the launcher as (step, reason) and ends the init with 125.
// The setup itself is the compiled plan (package program), run by RunUntil: the
// same program the raw init runs.
func initMain(ctl *os.File, uid, gid int, mapIDs bool) int {
	t := backend.NewTimer()
	fds, err := program.OpenFds()
	if err != nil {
		return reportSetup(ctl, "list init descriptors", err)
	}
	// The start that asks the init to map its own ids is the launcher's vfork start
	// (nsinit/vfork_linux_amd64.go), which marks every descriptor above the control
	// socket close-on-exec before the exec: one left open here is the launcher's
	// bug, and fails the launch.
	if err := closeInherited(fds, int(ctl.Fd()), mapIDs); err != nil {
		return reportSetup(ctl, "close inherited descriptors", err)
	}
	p, err := program.New(0, 1<<20, 0, fds, program.KernelFeatures())
	if err != nil {
		return reportSetup(ctl, "init", err)
	}

	// 1. Its own id maps (when the launcher did not write them), then not dumpable.
	p.CompileIDMap(uid, gid, mapIDs)
	next, step, err := p.RunUntil(0, p.A.Nops, nil)
	if err != nil {
		return reportSetup(ctl, step, err)
	}
	// 2. Every inherited fd becomes close-on-exec, the control socket included: the
	//    command gets 0, 1 and 2 and nothing else.
	CloseOnExecAbove2()
	os.Unsetenv(protocol.EnvRole)

	// 3. The plan, and with it, when this init was started ahead of its session,
	//    the command's standard streams.
	m, received, err := protocol.ReadFds(ctl)
	if err != nil || m.Type != protocol.MsgPlan || m.Plan == nil || len(m.Plan.Command) == 0 {
		return reportSetup(ctl, "receive plan", fmt.Errorf("expected %q message: %v", protocol.MsgPlan, err))
	}
	if err := installStdio(received); err != nil {
		return reportSetup(ctl, "receive standard streams", err)
	}
	plan := *m.Plan
	t.Mark("init-start")

	// 4. The plan compiled, here where it runs: the descriptors open now are the
	//    ones it must not reuse. Under bwrap the mounts are built and the
	//    privileges dropped already; the program does the rest.
	fds, err = program.OpenFds()
	if err != nil {
		return reportSetup(ctl, "list init descriptors", err)
	}
	p.SetFds(fds)
	if err := p.Compile(plan, program.Options{Nested: m.Nested}); err != nil {
		return reportSetup(ctl, "mount", err)
	}
	t.Mark("compile")
	// 5. Mounts in plan order, loopback up in a new network namespace.
	if next, step, err = p.RunUntil(next, p.NetDone, t.Mark); err != nil {
		return reportSetup(ctl, step, err)
	}
	// 5b. With --allow-net and --host-port, the listening sockets inside the new
	//     network namespace (under bwrap too, which brought loopback up), handed to
	//     the launcher, which serves them from outside: the only ways out.
	if step, err := sendListeners(ctl, plan); err != nil {
		return reportSetup(ctl, step, err)
	}
	// 6. Working directory, the setup's descriptors closed, every privilege
	//    dropped (per thread: see Main).
	if _, step, err = p.RunUntil(next, p.A.Nops, t.Mark); err != nil {
		return reportSetup(ctl, step, err)
	}
	if m.Nested {
		// bwrap promised this; check that it holds.
		if err := checkUnprivileged(); err != nil {
			return reportSetup(ctl, "drop privileges", err)
		}
	}
	// 7. Resolve the command in the sandbox's view, with the command's PATH.
	path, err := LookPath(plan.Command[0], protocol.Getenv(m.Env, "PATH"))
	if err != nil {
		return reportSetup(ctl, "command "+plan.Command[0], err)
	}
	// 8. No signal handler from here on (pid1_linux.go): the kernel then drops every
	//    signal sent to PID 1 from inside the sandbox, which cannot end or crash it.
	if err := dropSignalHandlers(); err != nil {
		return reportSetup(ctl, "reset signal handlers", err)
	}

	// 9. The command: its own process group, the terminal's foreground when the
	//    launcher held it; a session of its own when none of its streams is the
	//    controlling terminal.
	detach := !StreamsHoldControllingTerminal()
	pid, err := syscall.ForkExec(path, plan.Command, &syscall.ProcAttr{
		Dir:   plan.Workdir,
		Env:   m.Env,
		Files: []uintptr{0, 1, 2},
		Sys:   &syscall.SysProcAttr{Setsid: detach, Setpgid: !detach, Foreground: m.Foreground && !detach, Ctty: 0},
	})
	if err != nil {
		return reportSetup(ctl, "exec "+plan.Command[0], err)
	}
	t.Mark("exec-command")
	if err := protocol.Write(ctl, &protocol.Message{Type: protocol.MsgStarted, Phases: t.Phases, PID: pid}); err != nil {
		// The launcher is gone; Pdeathsig will end us. Keep the command's fate
		// tied to ours.
		_ = unix.Kill(pid, unix.SIGKILL)
		return protocol.ExitSetup
	}
	w := &ctlWriter{f: ctl}
	status, sig := supervise(w, pid, len(plan.Publish) > 0, m.Continue)
	endSession(w, status, sig, m.Nested)
	return status
}

// endSession ends every process left in the sandbox and reaps it, and tells the
// launcher how the command ended (protocol.MsgEnded: the signal that killed it, how many were
// left). Then, unless bwrap owns the namespaces (nested: the launcher waits for
// bwrap's exit), it tells the launcher the status: from then on nothing of the
// session runs, and the launcher need not wait for this process's own exit, in which
// the kernel tears down the namespaces and mounts (a few milliseconds it would
// otherwise add to every launch).
func endSession(ctl *ctlWriter, status int, sig syscall.Signal, nested bool) {
	// Those that have exited already were not left running: reaped first.
	for {
		pid, err := eintr.Retry(func() (int, error) { return unix.Wait4(-1, nil, unix.WNOHANG, nil) })
		if pid <= 0 || err != nil {
			break
		}
	}
	// PID 1 signalling -1 reaches every other process of its PID namespace; they are
	// all its children or reparented to it, so reaping until ECHILD sees them all gone.
	_ = unix.Kill(-1, unix.SIGKILL)
	// Until ECHILD; any other error ends the count too, and the report still goes
	// out, as the raw init does: the command's status is known either way.
	left := 0
	for {
		if _, err := eintr.Retry(func() (int, error) { return unix.Wait4(-1, nil, 0, nil) }); err != nil {
			break
		}
		left++
	}
	_ = ctl.write(&protocol.Message{Type: protocol.MsgEnded, Signal: int(sig), Left: left})
	if nested {
		return
	}
	// Our copies of the standard streams go too: a reader of the session's output
	// (a pipe into another program) sees its end now, not after our teardown.
	for fd := 0; fd <= 2; fd++ {
		_ = unix.Close(fd)
	}
	_ = ctl.write(&protocol.Message{Type: protocol.MsgExited, Status: status, PeakRSSKiB: peakRSS()})
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
// publish: the launcher may ask for sockets (--publish). cont: the launcher cannot
// mirror a stop, and the command is continued here, in the session's cgroup, rather
// than by a round trip through the launcher, which runs outside it (and so outside
// --cpus) and would work once per stop.
func supervise(ctl *ctlWriter, cmdPid int, publish, cont bool) (int, syscall.Signal) {
	go followLauncher(ctl, cmdPid, publish)
	for {
		var ws unix.WaitStatus
		pid, err := eintr.Retry(func() (int, error) { return unix.Wait4(-1, &ws, unix.WUNTRACED, nil) })
		if err != nil {
			// ECHILD: the command is gone without our seeing it end (cannot happen
			// while it is our child); report a setup-class failure, not success.
			return protocol.ExitSetup, 0
		}
		if pid != cmdPid {
			continue // an orphan, reaped
		}
		switch {
		case ws.Exited():
			return ws.ExitStatus(), 0
		case ws.Signaled():
			return 128 + int(ws.Signal()), ws.Signal()
		case ws.Stopped() && cont:
			_ = unix.Kill(-cmdPid, unix.SIGCONT)
		case ws.Stopped():
			_ = ctl.write(&protocol.Message{Type: protocol.MsgStopped})
		}
	}
}

// followLauncher carries out what the launcher asks while the command runs: a signal
// for the command, or to continue it after job control stopped it (taking the
// terminal's foreground back when the launcher was resumed in the foreground), or
// with --publish a socket of the sandbox's network namespace (sendSocket).
func followLauncher(ctl *ctlWriter, cmdPid int, publish bool) {
	for {
		m, err := protocol.Read(ctl.f)
		if err != nil {
			return
		}
		switch m.Type {
		case protocol.MsgSignal:
			if m.Signal > 0 && m.Signal < 65 {
				_ = unix.Kill(cmdPid, syscall.Signal(m.Signal))
			}
		case protocol.MsgContinue:
			if m.Foreground {
				SetForeground(0, cmdPid)
			}
			_ = unix.Kill(-cmdPid, unix.SIGCONT)
		case protocol.MsgSocket:
			sendSocket(ctl, publish)
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
	_ = protocol.Write(ctl, &protocol.Message{Type: protocol.MsgError, Step: step, Reason: err.Error()})
	return protocol.ExitSetup
}

// closeInherited closes every descriptor in fds (the init's, as listed at its
// start) above stderr that is not close-on-exec, but the control socket ctl, and
// drops it from fds. Such a descriptor came through the exec of this init from
// whatever started the launcher (a shell's redirection, a Go API caller's open
// file), where the start could not mark it (os/exec's fork, bwrap): it would stay
// open in PID 1 of the sandbox, a host file or directory, for the whole session.
// sealed says the start marked them all: then one found is an error. What Go
// opened in this process (the runtime's own, before main) is close-on-exec, and kept.
func closeInherited(fds map[int]bool, ctl int, sealed bool) error {
	for fd := range fds {
		if fd <= 2 || fd == ctl {
			continue
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC != 0 {
			continue
		}
		if sealed {
			return fmt.Errorf("descriptor %d came through the launcher's start without close-on-exec", fd)
		}
		unix.Close(fd)
		delete(fds, fd)
	}
	return nil
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

// LookPath finds name as a shell would, in the caller's view of the filesystem (the
// sandbox's, in the init); a directory or a non-executable file is refused, so
// that the launcher can say so (exit 125). agentbox exec --dry-run asks it too,
// to refuse what the real launch would refuse.
func LookPath(name, pathEnv string) (string, error) {
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
