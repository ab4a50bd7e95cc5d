package bench

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// orphanWait bounds the wait for a launch's leftover process: agentbox's raw init
// ends right after the launcher, once the kernel has torn its sandbox down.
const orphanWait = 5 * time.Second

// adoptOrphans makes the bench the reaper of whatever a launch leaves running when
// its launcher exits (agentbox's raw init ends after agentbox does), so that its CPU
// time is counted with the launch that started it instead of by whoever inherited it.
func adoptOrphans() error {
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}

// reapOrphans waits for the bench's children that are not in keep (the long-lived
// Go API probes) — processes a launch left behind and the kernel handed to the bench
// — and returns their CPU time (user + system, their own reaped children included).
// One still running after orphanWait is left alone and not counted.
func reapOrphans(keep map[int]bool) time.Duration {
	var cpu time.Duration
	for _, pid := range children() {
		if keep[pid] {
			continue
		}
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		// The bench, a subreaper now, gets SIGCHLD for every child: EINTR is not
		// the end of the wait.
		n, err := unix.Poll(fds, int(orphanWait/time.Millisecond))
		for err == unix.EINTR {
			n, err = unix.Poll(fds, int(orphanWait/time.Millisecond))
		}
		unix.Close(fd)
		if err != nil || n == 0 {
			continue
		}
		var ws syscall.WaitStatus
		var ru syscall.Rusage
		if got, err := syscall.Wait4(pid, &ws, 0, &ru); err == nil && got == pid {
			cpu += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
	}
	return cpu
}

// children lists the bench's child processes, over all its threads (a child's
// parent is the thread that started it; an adopted orphan's, the leader).
func children() []int {
	tasks, _ := filepath.Glob("/proc/self/task/*/children")
	var pids []int
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}
