package nsinit

import (
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/eintr"
)

// Only the amd64 starts (the raw init's clone, the vfork start) make children this
// way; elsewhere os/exec does.

// childProcess is a child of the calling process, started by a raw clone. reaped, when
// set, runs once, after the child was reaped.
func childProcess(pid int, reaped func()) *process {
	var once sync.Once
	return &process{Pid: pid, wait: func() exit {
		var ws unix.WaitStatus
		_, err := eintr.Retry(func() (int, error) { return unix.Wait4(pid, &ws, 0, nil) })
		if reaped != nil {
			once.Do(reaped)
		}
		return exit{ws: syscall.WaitStatus(ws), err: err}
	}}
}
