package compat

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/bwrapcheck"
	"github.com/agentbox/agentbox/mounts"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/ttyfilter"
)

// forwarded are the signals agentbox passes on to the command instead of dying of
// them itself.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// Run checks the bwrap binary (bwrapcheck.Lookup), runs it with Command's argv and
// stdio, with agentbox's environment, and returns the command's exit status: its own
// status, or 128+N when signal N killed it (bwrap's pid 1 reports it so). An error
// means agentbox or bwrap failed before the command started; the caller exits 125.
//
// The two are told apart with bwrap's --json-status-fd: bwrap reports "exit-code"
// only when setup finished and the command was executed. Without that report, a bwrap
// killed by signal N gives 128+N (the sandbox dies with it, --die-with-parent), and any
// other ending is a setup failure, whose reason bwrap has printed on stderr.
func Run(plan mounts.Plan, stdio Stdio) (Result, error) {
	var res Result
	t0 := time.Now()
	bin, err := bwrapcheck.Lookup()
	res.Phases = append(res.Phases, Phase{Name: "bwrap-check", Dur: time.Since(t0)})
	if err != nil {
		return res, err
	}
	res.Version = "bubblewrap " + bin.Version.String()
	argv, err := Command(bin.Path, plan)
	if err != nil {
		return res, err
	}
	if err := lookCommand(plan, os.Getenv("PATH")); err != nil {
		return res, err
	}

	filter, err := seccompPipe()
	if err != nil {
		return res, err
	}
	defer filter.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return res, fmt.Errorf("bwrap backend: status pipe: %w", err)
	}
	defer r.Close()
	cmd := &exec.Cmd{
		Path:   bin.Path,
		Args:   argv,
		Stdin:  stdio.Stdin,
		Stdout: stdio.Stdout,
		Stderr: stdio.Stderr,
		// ExtraFiles[i] becomes descriptor 3+i: StatusFD, SeccompFD.
		ExtraFiles: []*os.File{w, filter},
	}
	// bwrap passes every descriptor it inherits on to the command, so nothing but
	// stdio and the two above may reach it: a descriptor agentbox inherited without
	// close-on-exec would otherwise leak a host file into the sandbox.
	markCloexec()

	// Catch the signals before bwrap exists, so none is lost or kills agentbox.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)

	t1 := time.Now()
	err = cmd.Start()
	w.Close()
	filter.Close()
	if err != nil {
		return res, fmt.Errorf("bwrap backend: start %s: %w", bin.Path, err)
	}
	reports := make(chan status, 1)
	go func() { reports <- readStatus(r) }()
	done := make(chan struct{})
	go forward(sigs, cmd.Process, done)

	waitErr := cmd.Wait()
	close(done)
	st := <-reports
	if st.childPID != 0 {
		res.Phases = append(res.Phases, Phase{Name: "bwrap-spawn", Dur: st.childAt.Sub(t1)})
	}
	res.Phases = append(res.Phases, Phase{Name: "bwrap-run", Dur: time.Since(t1)})

	if st.exitCode != nil {
		res.Status = *st.exitCode
		return res, nil
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		res.Status = 128 + int(ws.Signal())
		return res, nil
	}
	if st.err != nil {
		return res, fmt.Errorf("bwrap backend: %w", st.err)
	}
	return res, fmt.Errorf("bwrap failed before the command started (%v); its message is above", waitErr)
}

// status is what bwrap reported on the status descriptor.
type status struct {
	childPID int       // the sandbox's pid 1 in agentbox's PID namespace; 0: not reported
	childAt  time.Time // when it was reported
	exitCode *int      // the command's exit status; nil: the command never ran
	err      error     // a report that could not be read
}

// readStatus reads bwrap's JSON lines until bwrap closes the descriptor: one
// {"child-pid": N, …} after the clone, one {"exit-code": N} after the command ended.
func readStatus(r *os.File) status {
	var st status
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var m struct {
			ChildPID *int `json:"child-pid"`
			ExitCode *int `json:"exit-code"`
		}
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			st.err = fmt.Errorf("status descriptor: %q: %w", sc.Text(), err)
			continue
		}
		if m.ChildPID != nil {
			st.childPID, st.childAt = *m.ChildPID, time.Now()
		}
		if m.ExitCode != nil {
			st.exitCode = m.ExitCode
		}
	}
	if err := sc.Err(); err != nil && st.err == nil {
		st.err = fmt.Errorf("status descriptor: %w", err)
	}
	return st
}

// forward passes each caught signal to the command, which is pid 2 of the sandbox's
// PID namespace (bwrap's own pid 1 reaps, and ignores signals from outside its
// namespace), so that a command that handles SIGTERM can still clean up, as with the
// native backend. When the command cannot be found (setup still running, or it has
// exited), the signal goes to bwrap itself, which dies of it and takes the sandbox
// with it.
//
// bwrap's monitor process shares the terminal's process group, so a Ctrl-C typed at
// the terminal reaches it directly and kills it (bubblewrap issue #369); agentbox
// cannot prevent that.
func forward(sigs <-chan os.Signal, bwrap *os.Process, done <-chan struct{}) {
	for {
		select {
		case <-done:
			return
		case sig := <-sigs:
			if pid := sandboxCommand(bwrap.Pid); pid > 0 {
				if err := syscall.Kill(pid, sig.(syscall.Signal)); err == nil {
					continue
				}
			}
			_ = bwrap.Signal(sig)
		}
	}
}

// sandboxCommand finds the command bwrap started: the process whose innermost PID is 2,
// a child of the sandbox's pid 1, which is a child of bwrap (or of bwrap's
// intermediate process). It returns 0 when there is none.
func sandboxCommand(bwrapPID int) int {
	for _, p1 := range children(bwrapPID) {
		for _, c := range children(p1) {
			if innermostPID(c) == 2 {
				return c
			}
		}
	}
	return 0
}

// children lists a process's children from /proc (CONFIG_PROC_CHILDREN).
func children(pid int) []int {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "task", strconv.Itoa(pid), "children"))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// innermostPID returns the last NSpid entry of a process: its PID in its own
// namespace; 0 when unknown.
func innermostPID(pid int) int {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				return 0
			}
			n, _ := strconv.Atoi(f[len(f)-1])
			return n
		}
	}
	return 0
}

// seccompPipe returns the read end of a pipe that holds the whole filter program
// (ttyfilter.Program); bwrap reads it to EOF. The program is a few hundred bytes, far below
// a pipe's capacity, so the write cannot block.
func seccompPipe() (*os.File, error) {
	prog, err := ttyfilter.Program()
	if err != nil {
		return nil, fmt.Errorf("bwrap backend: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("bwrap backend: seccomp pipe: %w", err)
	}
	_, err = w.Write(prog)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("bwrap backend: write seccomp program: %w", err)
	}
	return r, nil
}

// markCloexec sets close-on-exec on every descriptor above stderr, so that only what
// cmd.ExtraFiles names reaches bwrap. close_range needs Linux 5.11; older kernels get
// the /proc/self/fd walk.
func markCloexec() {
	if unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC) == nil {
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
