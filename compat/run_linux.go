package compat

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/backend"
	"github.com/agentbox/agentbox/bwrapcheck"
	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/nsinit"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/safepath"
	"github.com/agentbox/agentbox/internal/seccomp"
	"github.com/agentbox/agentbox/internal/termsafe"
)

// Run checks the bwrap binary (bwrapcheck.Lookup) and runs InitCommand's argv: bwrap
// builds the namespaces and mounts, agentbox's own init runs as the sandbox's PID 1
// and supervises the command exactly as under the native backend (nsinit.Supervise,
// the same launcher loop and control protocol). The status is the command's own, or
// 128+N when signal N killed it; an error means agentbox or bwrap failed before the
// command started, and the caller exits 125.
//
// beforeExec, when not nil, runs before bwrap starts (nsinit.Options.BeforeExec);
// afterStart, when not nil, runs with the PID of the sandbox's PID 1 (agentbox's
// init, bwrap's child) before the init has its plan (nsinit.Options.AfterStart).
func Run(plan mounts.Plan, stdio backend.Stdio, beforeExec func() error, afterStart func(pid int) error) (backend.Result, error) {
	return RunWith(plan, backend.Options{Stdio: stdio, BeforeExec: beforeExec, AfterStart: afterStart})
}

// RunWith is Run with the launch's options: Stdio, Env, BeforeExec, AfterStart, Cgroup, and
// Listener, HostPorts and Sockets, which get the sockets of bwrap's network
// namespace that the init creates (the proxy's, --host-port's, --publish's). The
// native backend's own fields (InitBinary, Signals, RawInit) do not apply.
func RunWith(plan mounts.Plan, o backend.Options) (backend.Result, error) {
	// A masked host socket that its daemon (or another session) removes between the
	// argv and bwrap's mount of it fails bwrap's setup: bwrap has no "try" for a
	// destination. Nothing of the command ran then, so the launch is made again
	// with the sockets as they are now (the argv leaves out the ones gone); the
	// host work before the command (BeforeExec) runs once.
	if before := o.BeforeExec; before != nil {
		var done bool
		var err error
		o.BeforeExec = func() error {
			if !done {
				done, err = true, before()
			}
			return err
		}
	}
	for attempt := 1; ; attempt++ {
		res, masked, err := runOnce(plan, o)
		if !errors.Is(err, errSetupFailed) || attempt == maxSetupAttempts || !anyGone(masked) {
			return res, err
		}
	}
}

// maxSetupAttempts bounds the launches a vanishing socket can cause.
const maxSetupAttempts = 3

// errSetupFailed: bwrap failed before the command started, and said why on stderr.
var errSetupFailed = errors.New("bwrap failed before the command started")

// anyGone reports whether one of paths no longer exists.
func anyGone(paths []string) bool {
	for _, p := range paths {
		if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
			return true
		}
	}
	return false
}

// runOnce is one launch of RunWith; masked are the destinations of the plan's
// IfExists covers that the argv holds (those that existed when it was built).
func runOnce(plan mounts.Plan, o backend.Options) (res backend.Result, masked []string, err error) {
	stdio := o.Stdio
	for _, op := range plan.Ops {
		if op.IfExists {
			if _, err := os.Lstat(op.Dest); err == nil {
				masked = append(masked, op.Dest)
			}
		}
	}
	t0 := time.Now()
	bin, err := bwrapcheck.Lookup(plan.Writable()...)
	res.Phases = append(res.Phases, backend.Phase{Name: "bwrap-check", Dur: time.Since(t0)})
	if err != nil {
		return res, masked, err
	}
	defer bin.Close()
	res.BackendVersion = "bubblewrap " + bin.Version.String()
	exe, err := selfPath()
	if err != nil {
		return res, masked, err
	}
	argv, sources, budget, err := InitCommand(bin.Path, plan, exe)
	if err != nil {
		return res, masked, err
	}
	srcFiles, err := openSources(sources, plan)
	if err != nil {
		return res, masked, err
	}
	defer func() {
		for _, f := range srcFiles {
			f.Close()
		}
	}()

	filter, err := seccompPipe(seccomp.Rules{ConfineSockets: plan.ConfineSockets})
	if err != nil {
		return res, masked, err
	}
	defer filter.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return res, masked, fmt.Errorf("bwrap backend: status pipe: %w", err)
	}
	defer r.Close()
	ctl, child, err := nsinit.ControlSocket()
	if err != nil {
		return res, masked, fmt.Errorf("bwrap backend: %w", err)
	}
	defer ctl.Close()

	cmd := nsinit.InitCommand(bin.Path, ControlFD, stdio)
	cmd.Args = argv
	bwrapStderr, err := escapedStderr(stdio.Stderr)
	if err != nil {
		return res, masked, err
	}
	if bwrapStderr != nil {
		cmd.Stderr = bwrapStderr.w
	}
	// ExtraFiles[i] becomes descriptor 3+i: StatusFD, SeccompFD, ControlFD, the
	// bind sources from FirstSourceFD, then the checked bwrap binary, which the
	// stage executes (and closes, unless it is a script).
	cmd.ExtraFiles = append([]*os.File{w, filter, child}, srcFiles...)
	bwrapFD := 3 + len(cmd.ExtraFiles)
	cmd.ExtraFiles = append(cmd.ExtraFiles, bin.File)
	// Its own process group: a Ctrl-C typed at the terminal goes to the command (in
	// the foreground), never to bwrap's monitor, which would die of it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	privateStage(cmd.SysProcAttr)
	// bwrap runs from the stage, by the descriptor checked: never by its path.
	cmd.Path = stageCommand(cmd.SysProcAttr, &cmd.Args, &cmd.Env, bwrapFD, budget, plan.UserLimits)
	if o.Cgroup != nil {
		// bwrap makes the sandbox's cgroup namespace as it clones its child, in the
		// cgroup it is in then: it starts in the session's, so the namespace is
		// rooted there (its own process is the session's too).
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(o.Cgroup.Fd())
	}
	// bwrap passes every descriptor it inherits on to the sandbox, so nothing but
	// stdio and the three above may reach it.
	nsinit.CloseOnExecAbove2()

	reports := make(chan error, 1)
	childPID := make(chan int, 1)
	go func() { reports <- readStatus(r, childPID) }()

	opts := backend.Options{Stdio: stdio, Env: o.Env, BeforeExec: o.BeforeExec, Listener: o.Listener, HostPorts: o.HostPorts, Sockets: o.Sockets}
	if afterStart := o.AfterStart; afterStart != nil {
		opts.AfterStart = func(int) error {
			// bwrap reports its child once it is cloned; no report means bwrap
			// failed, which the launch then says.
			if pid, ok := <-childPID; ok {
				return afterStart(pid)
			}
			return nil
		}
	}
	out, err := nsinit.Supervise(nsinit.Launch{Cmd: cmd, Ctl: ctl, Plan: plan, Nested: true, StreamsWithPlan: bwrapStderr != nil}, opts)
	w.Close()
	// bwrap has ended: what it said is on the operator's stderr before anything
	// agentbox says of it.
	bwrapStderr.drain()
	res.Phases = append(res.Phases, out.Phases...)
	res.Status, res.Signal, res.Left, res.Terminal = out.Status, out.Signal, out.Left, out.Terminal
	var se *nsinit.SetupError
	if errors.As(err, &se) && se.Step == nsinit.StepInitEnded {
		// The init never reported: bwrap itself failed, and said why on stderr.
		if err := <-reports; err != nil {
			return res, masked, fmt.Errorf("bwrap backend: %w", err)
		}
		return res, masked, fmt.Errorf("%w (exit status %d); its message is above", errSetupFailed, se.Status)
	}
	return res, masked, err
}

// bwrapStderr is the pipe bwrap (and the stage before it, and the init until it
// has the command's streams) writes its messages into, copied to the operator's
// stderr through termsafe. bwrap's messages name the plan's paths, which a session
// can choose (a nested repository's .git, a socket it bound), and bwrap prints them
// raw: "Can't mkdir" with an ESC sequence in the name would reach the terminal. The
// command never gets this pipe: the init installs the command's own streams, sent
// with the plan, before anything of the session runs.
type bwrapStderr struct {
	w    *os.File
	done chan struct{}
}

// escapedStderr starts copying a new pipe to stderr; nil when there is no stderr
// (bwrap's then goes to /dev/null, as the command's does).
func escapedStderr(stderr *os.File) (*bwrapStderr, error) {
	if stderr == nil {
		return nil, nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("bwrap backend: stderr pipe: %w", err)
	}
	b := &bwrapStderr{w: w, done: make(chan struct{})}
	go func() {
		defer close(b.done)
		defer r.Close()
		out := termsafe.NewWriter(stderr)
		io.Copy(out, r)
		out.Flush()
	}()
	return b, nil
}

// drain closes the launcher's end and waits for the copy to end, which it does once
// bwrap and the stage, the pipe's only other holders, have exited.
func (b *bwrapStderr) drain() {
	if b == nil {
		return
	}
	b.w.Close()
	<-b.done
}

// readStatus reads bwrap's JSON lines until bwrap closes the descriptor ({"child-pid":
// N, …} after the clone, {"exit-code": N} after the command ended) and returns what
// could not be read. The init reports the rest itself. The child's PID goes to
// childPID, which is closed at the end.
func readStatus(r *os.File, childPID chan<- int) error {
	defer close(childPID)
	var bad error
	sent := false
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var m struct {
			ChildPID *int `json:"child-pid"`
			ExitCode *int `json:"exit-code"`
		}
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			bad = fmt.Errorf("status descriptor: %q: %w", sc.Text(), err)
		}
		if m.ChildPID != nil && !sent {
			childPID <- *m.ChildPID
			sent = true
		}
	}
	if err := sc.Err(); err != nil && bad == nil {
		bad = fmt.Errorf("status descriptor: %w", err)
	}
	return bad
}

// seccompPipe returns the read end of a pipe that holds the whole filter program
// (seccomp.Program) with the plan's rules; bwrap reads it to EOF. The program is a few hundred bytes, far below
// a pipe's capacity, so the write cannot block.
func seccompPipe(rules seccomp.Rules) (*os.File, error) {
	prog, err := seccomp.Program(rules)
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

// openSources opens each bind source without following a symlink in any component
// (O_PATH): a path swapped for a link after the plan was made fails here instead of
// sending a writable bind elsewhere, and so does a source that is not the one the
// launcher verified (mounts.Op.SourceID), swapped without a link.
func openSources(paths []string, plan mounts.Plan) ([]*os.File, error) {
	want := map[string]mounts.FileID{}
	for _, op := range plan.Ops {
		if op.SourceID != (mounts.FileID{}) {
			want[op.Source] = op.SourceID
		}
	}
	var files []*os.File
	fail := func(p string, err error) ([]*os.File, error) {
		for _, f := range files {
			f.Close()
		}
		return nil, fmt.Errorf("bwrap backend: open bind source %s: %w", p, err)
	}
	for _, p := range paths {
		open := safepath.Open
		if p == selfExe {
			open = openSelf
		}
		fd, err := open(p, unix.O_PATH)
		if err != nil {
			return fail(p, err)
		}
		f := os.NewFile(uintptr(fd), p)
		if err := nsinit.CheckSourceID(fd, want[p]); err != nil {
			f.Close()
			return fail(p, err)
		}
		files = append(files, f)
	}
	return files, nil
}

// openSelf opens the running binary (selfExe), following the magic link, which is
// the point. bwrap binds a source by its path, which the binary no longer has once
// something replaced or removed it: that launch is refused with a line saying so.
func openSelf(p string, flags int) (int, error) {
	if l, err := os.Readlink(p); err != nil || strings.HasSuffix(l, " (deleted)") {
		return -1, errors.New("the agentbox binary was replaced or removed since this agentbox started; no sandbox was started: run agentbox again")
	}
	return unix.Open(p, flags|unix.O_CLOEXEC, 0)
}
