package netsvc

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// agentDirPrefix names the --ssh-agent filter's directories below /tmp:
// agentbox-ssh-PID-RANDOM, PID the launcher's, so that a launcher that was killed
// (SIGKILL runs no cleanup) leaves one that a later launch can tell is stale.
const agentDirPrefix = "agentbox-ssh-"

// makeAgentDir creates the filter's directory (mode 0700) below dir.
func makeAgentDir(dir string) (string, error) {
	return os.MkdirTemp(dir, fmt.Sprintf("%s%d-", agentDirPrefix, os.Getpid()))
}

// collectAgentDirs removes the filter directories below dir that killed launchers
// left: a directory (never a symlink) of the calling user's, named after a
// launcher PID that no longer runs, whose socket nobody answers on any more (a
// launcher in another PID namespace sharing /tmp may have that PID for us). Only
// the socket and the directory go; anything else in it keeps it. /tmp is sticky, so
// no other user can swap an entry of ours between the checks and the removal.
func collectAgentDirs(dir string) {
	f, err := os.Open(dir)
	if err != nil {
		return
	}
	defer f.Close()
	uid := os.Getuid()
	for {
		names, err := f.Readdirnames(512)
		for _, name := range names {
			if d := filepath.Join(dir, name); staleAgentDir(d, name, uid) {
				_ = unix.Unlink(filepath.Join(d, "agent.sock"))
				_ = unix.Rmdir(d)
			}
		}
		if err != nil {
			return
		}
	}
}

// staleAgentDir: d (named name) is a filter directory of uid's whose launcher is gone.
func staleAgentDir(d, name string, uid int) bool {
	rest, ok := strings.CutPrefix(name, agentDirPrefix)
	if !ok {
		return false
	}
	pidStr, _, ok := strings.Cut(rest, "-")
	pid, err := strconv.Atoi(pidStr)
	if !ok || err != nil || pid <= 0 || pid == os.Getpid() {
		return false
	}
	var st unix.Stat_t
	if unix.Lstat(d, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != uid {
		return false
	}
	if err := unix.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		return false // running, or another user's process now has the PID
	}
	c, err := net.DialTimeout("unix", filepath.Join(d, "agent.sock"), 100*time.Millisecond)
	if err == nil {
		c.Close()
		return false
	}
	return true
}
