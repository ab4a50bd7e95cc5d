// Package ptytest drives programs through a real pseudo-terminal, as a person at a
// terminal would: the program is a session leader whose controlling terminal is the
// pty's slave, and the test types into the master (Ctrl-Z, Ctrl-C, "fg") and waits
// for what the program prints. Waits are for markers the program prints, bounded
// against hangs, never sleeps taken as proof.
package ptytest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Timeout bounds every wait: a hang fails the test instead of stalling the suite.
// It is no measure of speed: a launch on a loaded CI machine (2 cores, load 10 and
// more) can take seconds before the program prints what a wait is for.
const Timeout = time.Minute

// Term is a program running on a fresh pseudo-terminal.
type Term struct {
	t      testing.TB
	Master *os.File
	Slave  *os.File // kept open by the test: the pty stays usable after the program exits
	Cmd    *exec.Cmd
	// Before is the terminal's modes as they were before the program started.
	Before unix.Termios

	mu   sync.Mutex
	buf  []byte // everything read from the master
	seen int    // where the next Expect starts
	more chan struct{}
	eof  bool
}

// Open opens a pseudo-terminal pair (/dev/ptmx; devpts sets the slave's owner, so
// no grantpt step) and hands the slave to uid:gid when they are not -1.
func Open(t testing.TB, uid, gid int) (master, slave *os.File) {
	t.Helper()
	// Non-blocking from the start, so that os.NewFile hands it to Go's poller: the
	// reading goroutine then parks, and Close interrupts its read (a blocking master,
	// as f.Fd() would leave it, could not be closed while a read waits on it).
	mfd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Fatalf("no pseudo-terminals here: %v", err)
	}
	if err := unix.IoctlSetPointerInt(mfd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlockpt: %v", err)
	}
	n, err := unix.IoctlGetUint32(mfd, unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("ptsname: %v", err)
	}
	// A size, as a terminal emulator sets one.
	_ = unix.IoctlSetWinsize(mfd, unix.TIOCSWINSZ, &unix.Winsize{Row: 24, Col: 200})
	m := os.NewFile(uintptr(mfd), "/dev/ptmx")
	name := "/dev/pts/" + strconv.Itoa(int(n))
	if uid >= 0 {
		if err := os.Chown(name, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	s, err := os.OpenFile(name, os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open slave: %v", err)
	}
	return m, s
}

// Start runs cmd as a session leader with a fresh pty as its controlling terminal and
// standard streams. The pty's slave is given to the command's credentials.
func Start(t testing.TB, cmd *exec.Cmd) *Term {
	t.Helper()
	uid, gid := -1, -1
	if cmd.SysProcAttr != nil && cmd.SysProcAttr.Credential != nil {
		uid, gid = int(cmd.SysProcAttr.Credential.Uid), int(cmd.SysProcAttr.Credential.Gid)
	}
	master, slave := Open(t, uid, gid)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setsid, cmd.SysProcAttr.Setctty, cmd.SysProcAttr.Ctty = true, true, 0
	term := &Term{t: t, Master: master, Slave: slave, Cmd: cmd, more: make(chan struct{}, 1)}
	term.Before = *term.Termios()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go term.read()
	t.Cleanup(term.Close)
	return term
}

func (term *Term) read() {
	b := make([]byte, 4096)
	for {
		n, err := term.Master.Read(b)
		term.mu.Lock()
		term.buf = append(term.buf, b[:n]...)
		if err != nil {
			term.eof = true
		}
		term.mu.Unlock()
		select {
		case term.more <- struct{}{}:
		default:
		}
		if err != nil {
			return
		}
	}
}

// Send types s.
func (term *Term) Send(s string) {
	term.t.Helper()
	if _, err := term.Master.WriteString(s); err != nil {
		term.t.Fatalf("typing %q: %v", s, err)
	}
}

// Expect waits for re in what the program printed since the previous match and
// returns the match (with its groups); it fails the test after Timeout.
func (term *Term) Expect(re string) []string {
	term.t.Helper()
	m, err := term.ExpectErr(re)
	if err != nil {
		term.t.Fatal(err)
	}
	return m
}

// ExpectErr is Expect returning the failure instead.
func (term *Term) ExpectErr(re string) ([]string, error) {
	rx := regexp.MustCompile(re)
	deadline := time.After(Timeout)
	for {
		term.mu.Lock()
		rest := term.buf[term.seen:]
		loc := rx.FindSubmatchIndex(rest)
		eof := term.eof
		if loc != nil {
			var groups []string
			for i := 0; i < len(loc); i += 2 {
				if loc[i] < 0 {
					groups = append(groups, "")
					continue
				}
				groups = append(groups, string(rest[loc[i]:loc[i+1]]))
			}
			term.seen += loc[1]
			term.mu.Unlock()
			return groups, nil
		}
		term.mu.Unlock()
		if eof {
			return nil, fmt.Errorf("terminal closed before %q; it printed:\n%s", re, term.Tail())
		}
		select {
		case <-term.more:
		case <-deadline:
			return nil, fmt.Errorf("no %q within %v; the terminal shows:\n%s", re, Timeout, term.Tail())
		}
	}
}

// Tail is the last part of everything printed, for failure messages.
func (term *Term) Tail() string {
	term.mu.Lock()
	defer term.mu.Unlock()
	b := term.buf
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(bytes.ReplaceAll(b, []byte("\r"), nil))
}

// Termios is the terminal's current modes.
func (term *Term) Termios() *unix.Termios {
	term.t.Helper()
	tio, err := unix.IoctlGetTermios(int(term.Slave.Fd()), unix.TCGETS)
	if err != nil {
		term.t.Fatal(err)
	}
	return tio
}

// Wait waits for the program to end, bounded by Timeout; it fails the test on a hang.
func (term *Term) Wait() *os.ProcessState {
	term.t.Helper()
	done := make(chan struct{})
	go func() { _ = term.Cmd.Wait(); close(done) }()
	select {
	case <-done:
		return term.Cmd.ProcessState
	case <-time.After(Timeout):
		_ = term.Cmd.Process.Kill()
		<-done
		term.t.Fatalf("the program did not end within %v; the terminal shows:\n%s", Timeout, term.Tail())
		return nil
	}
}

// Foreground is the terminal's foreground process group, asked through the master
// (the test process does not have the terminal as its controlling one).
func (term *Term) Foreground() (int, error) {
	rc, err := term.Master.SyscallConn()
	if err != nil {
		return 0, err
	}
	var pgrp int
	var ierr error
	if err := rc.Control(func(fd uintptr) { pgrp, ierr = unix.IoctlGetInt(int(fd), unix.TIOCGPGRP) }); err != nil {
		return 0, err
	}
	return pgrp, ierr
}

// OutputFlows reports whether a byte written to the terminal now gets through (its
// output is not stopped), without blocking: the write is non-blocking.
func (term *Term) OutputFlows() error {
	fd := int(term.Slave.Fd())
	if err := unix.SetNonblock(fd, true); err != nil {
		return err
	}
	defer func() { _ = unix.SetNonblock(fd, false) }()
	if _, err := unix.Write(fd, []byte("FLOWS\n")); err != nil {
		return fmt.Errorf("write to the terminal: %w (output stopped?)", err)
	}
	_, err := term.ExpectErr("FLOWS")
	return err
}

// Close ends the program's session: the master's close hangs the terminal up (SIGHUP
// to the session leader, which an interactive bash passes on to its jobs, stopped
// ones continued), the program is killed should it survive that for long, and so is
// whatever is left of its session: a failed test leaves no stopped job behind.
func (term *Term) Close() {
	term.Master.Close()
	if p := term.Cmd.Process; p != nil {
		if term.Cmd.ProcessState == nil {
			done := make(chan struct{})
			go func() { _, _ = p.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				_ = p.Kill()
				<-done
			}
		}
		killSession(p.Pid)
	}
	term.Slave.Close()
}

// killSession kills every process of session sid.
func killSession(sid int) {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp session …: from the last ')', comm may hold anything.
		f := bytes.Fields(b[bytes.LastIndexByte(b, ')')+1:])
		if len(f) > 3 && string(f[3]) == strconv.Itoa(sid) {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	}
}

// Prompt is the prompt Shell's bash prints.
const Prompt = "PROMPT-READY\\$ "

// ShellArgs is how Shell starts bash: interactive, no rc files, a prompt to wait for.
var ShellArgs = []string{"--norc", "--noprofile", "-i"}

// Shell starts an interactive bash (job control on) from cmd (whose Path and Args it
// replaces) and waits for its first prompt. stty -echoctl keeps typed control
// characters out of the output.
func Shell(t testing.TB, cmd *exec.Cmd) *Term {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatalf("bash: %v", err)
	}
	cmd.Path, cmd.Args = bash, append([]string{"bash"}, ShellArgs...)
	cmd.Env = append(cmd.Env, "PS1=PROMPT-READY$ ", "TERM=dumb", "PROMPT_COMMAND=")
	term := Start(t, cmd)
	term.Expect(Prompt)
	term.Send("stty -echoctl\n")
	term.Expect(Prompt)
	return term
}

// Run types line at a prompt and waits for the next prompt; it returns what was
// printed in between.
func (term *Term) Run(line string) string {
	term.t.Helper()
	term.Send(line + "\n")
	return term.Expect("(?s)^(.*?)" + Prompt)[1]
}
