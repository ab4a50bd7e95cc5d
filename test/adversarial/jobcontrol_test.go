package adversarial

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testkit/ptytest"
	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
)

// Job control and the end of a session, driven through a real pseudo-terminal with
// an interactive bash (job control on), as the operator types at it
// (docs/terminal.md). Rounds are repeated: the faults these rows guard against were
// races that showed up one time in three to one in eight.
const jobRounds = 20

// shellFor starts `bash -i` as the test user on a fresh pty, in the box's repo, with
// the box's environment, and returns it at its first prompt.
func shellFor(t *testing.T, b *sandboxtest.Box) *ptytest.Term {
	t.Helper()
	cmd := b.Agentbox(b.Repo) // the box's user, directory and environment
	return ptytest.Shell(t, cmd)
}

// execLine is the shell line that runs script sandboxed: the markers it prints are
// split with "" so that the line's own echo never matches them.
func execLine(b *sandboxtest.Box, script string) string {
	return fmt.Sprintf("%s exec --backend %s --no-record --no-git-save -- sh -c '%s'", b.Bin, b.Backend, script)
}

// TestCtrlZFgResumes: Ctrl-Z then fg, again and again, on a command that reads the
// terminal. Each fg must resume it with the terminal its own: a line typed then is
// read by the command, not stopped by SIGTTIN (which bash reports as the job
// "Stopped" right after fg). Both the stop and the resume are waited for by what
// bash and the command print.
func TestCtrlZFgResumes(t *testing.T) {
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			term := shellFor(t, b)
			term.Send(execLine(b, `echo RE""ADY; exec cat`) + "\n")
			term.Expect(`READY\r\n`)
			for i := 0; i < jobRounds; i++ {
				term.Send(fmt.Sprintf("ping-%d\n", i))
				term.Expect(fmt.Sprintf(`ping-%d\r\nping-%d\r\n`, i, i)) // the echo, then cat's copy
				term.Send("\x1a")
				term.Expect(`Stopped[^\n]*\n` + ptytest.Prompt)
				term.Send("fg\n")
				term.Expect(`fg\r\n[^\n]*exec --backend[^\n]*\n`) // bash names the job it resumes
				term.Send(fmt.Sprintf("after-%d\n", i))
				// cat's copy of the line, or bash saying the job stopped again.
				m := term.Expect(fmt.Sprintf(`(after-%d\r\n(?:[^\n]*\n)??after-%d\r\n|Stopped)`, i, i))
				if m[1] == "Stopped" {
					t.Fatalf("round %d of %d: the command was stopped again right after fg:\n%s", i+1, jobRounds, term.Tail())
				}
			}
			term.Send("\x04") // cat's end of input: the session ends
			term.Expect(ptytest.Prompt)
		})
	}
}

// TestCtrlCEndsShellLoop: Ctrl-C typed while a shell loop runs agentbox ends the
// loop, as it does for an unsandboxed command: agentbox ends by the signal that
// killed its command (after its audit and record), so bash sees an interrupted job
// ("wait and cooperative exit"), prints the prompt on a fresh line and $? is 130.
func TestCtrlCEndsShellLoop(t *testing.T) {
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			term := shellFor(t, b)
			loop := fmt.Sprintf(`for i in 1 2 3; do %s; echo "ne""xt $i"; done; echo "LOOP""-DONE"`,
				execLine(b, `echo RE""ADY; exec sleep 100`))
			for i := 0; i < jobRounds; i++ {
				term.Send(loop + "\n")
				term.Expect(`READY\r\n`)
				term.Send("\x03")
				m := term.Expect(`(?s)^(.*?)(next 1|LOOP-DONE|` + ptytest.Prompt + `)`)
				out := m[1]
				if m[2] == "next 1" || m[2] == "LOOP-DONE" {
					t.Fatalf("round %d of %d: Ctrl-C did not end the loop:\n%s", i+1, jobRounds, term.Tail())
				}
				if !strings.HasSuffix(out, "\n") {
					t.Errorf("round %d: the prompt after Ctrl-C is not on a fresh line: %q", i, out)
				}
				if st := term.Run(`echo "st=$?"`); !strings.Contains(st, "st=130") {
					t.Fatalf("round %d: $? after Ctrl-C: %q", i, st)
				}
			}
		})
	}
}

// TestLeftProcessesSaid: background processes still running when the command ends
// are killed (nothing of a session outlives it) and agentbox says so, once, on
// stderr, and in the session's record.
func TestLeftProcessesSaid(t *testing.T) {
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			r := sandboxtest.Run(b.Command(b.Repo, []string{"--no-git-save"}, `sleep 100 & sleep 100 & sleep 0.01 & wait $!; echo started`))
			if r.Code != 0 || r.Stdout != "started\n" {
				t.Fatalf("session: %s", r)
			}
			if want := "agentbox: killed 2 processes left running\n"; r.Stderr != want {
				t.Errorf("stderr %q, want %q", r.Stderr, want)
			}
			out := agentbox(t, b, "log", "--repo", b.Repo)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if len(lines) != 2 {
				t.Fatalf("log: %q", out)
			}
			show := agentbox(t, b, "show", "--json", strings.Fields(lines[1])[0])
			if !strings.Contains(show, `"killed_left_running": 2`) {
				t.Errorf("the record does not keep the count:\n%s", show)
			}
			// None left: nothing said.
			r = sandboxtest.Run(b.Command(b.Repo, []string{"--no-git-save", "--no-record"}, `sleep 0.01 & wait; echo started`))
			if r.Code != 0 || r.Stderr != "" {
				t.Errorf("no process left: %s", r)
			}
			// On the operator's terminal, again and again: the line each time, once,
			// on a line of its own, and the shell's prompt after it.
			term := shellFor(t, b)
			for i := 0; i < jobRounds; i++ {
				out := term.Run(execLine(b, `sleep 100 & sleep 100 & echo "star""ted"`))
				// Each line of agentbox's ends with CR before its newline (termout: a
				// terminal left in raw mode gets column 0 too), which the pty follows by
				// CR LF.
				if strings.Count(out, "agentbox: killed 2 processes left running\r") != 1 || !strings.Contains(out, "started\r\n") {
					t.Fatalf("round %d of %d on a pty: %q", i+1, jobRounds, out)
				}
			}
		})
	}
}

// TestTerminalRestored: the command leaves the operator's terminal raw, without
// echo, and with its output stopped (tcflow TCOOFF), and a process behind, about
// which agentbox must then write a line. The modes are as they were before the
// session once agentbox has exited, and its line was written, not blocked on the
// stopped output. agentbox runs as the session leader on the pty here, with no shell
// in between that would restore the modes itself. Each case runs jobRounds rounds.
func TestTerminalRestored(t *testing.T) {
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			for _, c := range []struct{ name, script string }{
				{"raw", `stty raw -echo -isig; echo "RE""ADY"`},
				{"crashed in raw mode", `stty raw -echo; echo "RE""ADY"; kill -SEGV $$`},
				{"output stopped", `sleep 100 & stty -echo -icanon; echo "RE""ADY"; perl -MPOSIX -e "tcflow(1, TCOOFF) or die qq(tcflow: \$!)"`},
			} {
				for round := 1; round <= jobRounds; round++ {
					if !terminalRestoredOnce(t, b, c.name, c.script, round) {
						break
					}
				}
			}
		})
	}
}

// terminalRestoredOnce runs one round of a TestTerminalRestored case on a fresh pty,
// and reports whether it passed (the rounds of a case stop at its first failure).
func terminalRestoredOnce(t *testing.T, b *sandboxtest.Box, name, script string, round int) bool {
	t.Helper()
	failedBefore := t.Failed()
	name = fmt.Sprintf("%s, round %d of %d", name, round, jobRounds)
	cmd := b.Command(b.Repo, []string{"--no-git-save", "--no-record"}, "")
	cmd.Args = append(cmd.Args, "--", "/bin/sh", "-c", script)
	term := ptytest.Start(t, cmd)
	defer term.Close()
	term.Expect(`READY`)
	st := term.Wait()
	if strings.Contains(script, "sleep 100 &") {
		term.Expect(`agentbox: killed 1 process left running`)
	}
	if after := *term.Termios(); after != term.Before {
		t.Errorf("%s: terminal modes after the session differ from before:\nbefore %+v\nafter  %+v", name, term.Before, after)
	}
	if err := term.OutputFlows(); err != nil {
		t.Errorf("%s: %v", name, err)
	}
	if strings.Contains(name, "crashed") {
		// A terminal session: agentbox ends by the command's signal, and dumps no
		// core of its own.
		ws := st.Sys().(syscall.WaitStatus)
		if !ws.Signaled() || ws.Signal() != syscall.SIGSEGV || ws.CoreDump() {
			t.Errorf("%s: agentbox ended %v, want by SIGSEGV without a core", name, st)
		}
	} else if !st.Success() {
		t.Errorf("%s: %v\n%s", name, st, term.Tail())
	}
	return t.Failed() == failedBefore
}

// TestEndInBackground: agentbox stopped with Ctrl-Z and resumed with bg ends in the
// background. The shell keeps the terminal's foreground (agentbox takes it back only
// from its command, not from the shell), and agentbox's own line about the process
// left running does not block it for ever though the terminal's output is stopped
// (tcflow TCOOFF, by the test here, as a command could have left it before bg, or the
// operator's Ctrl-S): the write is bounded, and agentbox ends.
func TestEndInBackground(t *testing.T) {
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			term := shellFor(t, b)
			shell := term.Cmd.Process.Pid
			term.Send(execLine(b, `sleep 100 & echo RE""ADY; exec sleep 1000`) + "\n")
			term.Expect(`READY\r\n`)
			term.Send("\x1a")
			term.Expect(`Stopped[^\n]*\n` + ptytest.Prompt)
			term.Run("bg >/dev/null")
			launcher := childOf(t, shell)
			fd := int(term.Slave.Fd())
			if err := unix.IoctlSetInt(fd, unix.TCXONC, unix.TCOOFF); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = unix.IoctlSetInt(fd, unix.TCXONC, unix.TCOON) }()
			if err := syscall.Kill(launcher, syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			// A bound against a hang (the write's own bound is 5 s), not a timing check.
			if !sandboxtest.WaitForUpTo(60*time.Second, func() bool { return ended(launcher) }) {
				t.Fatalf("agentbox did not end in the background with the terminal's output stopped")
			}
			if pgrp, err := term.Foreground(); err != nil || pgrp != shell {
				t.Errorf("the terminal's foreground after the session: %d (%v), want the shell's %d", pgrp, err, shell)
			}
			if err := unix.IoctlSetInt(fd, unix.TCXONC, unix.TCOON); err != nil {
				t.Fatal(err)
			}
			if out := term.Run(`echo "sh""ell ok"`); !strings.Contains(out, "shell ok") {
				t.Errorf("the shell after the session: %q", out)
			}
		})
	}
}

// childOf is the one child process of pid.
func childOf(t *testing.T, pid int) int {
	t.Helper()
	var kids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid …: comm may hold spaces, so from the last ')'.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			kids = append(kids, n)
		}
	}
	if len(kids) != 1 {
		t.Fatalf("children of %d: %v, want one", pid, kids)
	}
	return kids[0]
}

// ended reports whether pid has exited (gone, or a zombie not yet reaped).
func ended(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) > 0 && (f[0] == "Z" || f[0] == "X")
}
