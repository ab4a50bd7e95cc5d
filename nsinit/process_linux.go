package nsinit

import (
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// process is a started init (or bwrap, for the bwrap backend) as Supervise needs it:
// its PID, and its end.
//
// The native init is not an *os.Process: os.FindProcess makes the first pidfd use of
// the process, which costs a probe fork (a vfork with CLONE_PIDFD) on every
// `agentbox exec`, which starts one init per process.
type process struct {
	Pid  int
	wait func() exit
}

// exit is how a process ended.
type exit struct {
	ws  syscall.WaitStatus
	err error // the wait itself failed: the status is unknown
}

// osProcess is a child started by os/exec.
func osProcess(p *os.Process) *process {
	return &process{Pid: p.Pid, wait: func() exit {
		st, err := p.Wait()
		if err != nil {
			return exit{err: err}
		}
		return exit{ws: st.Sys().(syscall.WaitStatus)}
	}}
}

// kill ends the process. Only before it was waited for: its PID is free after that.
func (p *process) kill() { _ = unix.Kill(p.Pid, unix.SIGKILL) }

// status maps how the init ended to agentbox's exit status: the init exits with the
// command's status itself; 128+N only if the init itself was killed.
func (e exit) status() int {
	switch {
	case e.err != nil:
		return exitSetup
	case e.ws.Signaled():
		return 128 + int(e.ws.Signal())
	}
	return e.ws.ExitStatus()
}

func (e exit) String() string {
	switch {
	case e.err != nil:
		return "unknown status: " + e.err.Error()
	case e.ws.Signaled():
		return "signal: " + e.ws.Signal().String()
	}
	return "exit status " + strconv.Itoa(e.ws.ExitStatus())
}
