package leafcg

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// leftoverAge is how old a dead launcher's session cgroup must be before another
// launch removes it: a live launcher's is empty only for the moment between its
// mkdir and the init's start, and a launcher in another PID namespace may look dead.
var leftoverAge = time.Minute

// removeLeftovers removes what launchers killed before their Remove (SIGKILL, an
// OOM kill, power loss) left in dir, the cgroup a launch is about to make its own
// in: session cgroups (agentbox-PID-N) of this user whose launcher is gone, that
// hold no process and are older than leftoverAge. A limited one keeps its limits
// and counts against cgroup.max.descendants until removed; one still holding
// processes is left alone (its session is not over).
func removeLeftovers(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	uid := os.Getuid()
	for _, e := range ents {
		pid, ok := launcherOf(e.Name())
		if !ok || !e.IsDir() || pidAlive(pid) {
			continue
		}
		p := filepath.Join(dir, e.Name())
		var st unix.Stat_t
		if unix.Lstat(p, &st) != nil || int(st.Uid) != uid || time.Since(time.Unix(st.Ctim.Unix())) < leftoverAge || populated(p) {
			continue
		}
		dirs := (&Leaf{Top: p}).tree()
		slices.Reverse(dirs)
		for _, d := range dirs {
			_ = unix.Rmdir(d)
		}
	}
}

// launcherOf is the launcher's PID in a session cgroup's name, agentbox-PID-N.
func launcherOf(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, "agentbox-")
	if !ok {
		return 0, false
	}
	pidText, n, ok := strings.Cut(rest, "-")
	pid, err := strconv.Atoi(pidText)
	if _, nerr := strconv.ParseUint(n, 10, 64); !ok || err != nil || nerr != nil || pid <= 0 {
		return 0, false
	}
	return pid, true
}

func pidAlive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || err == unix.EPERM
}

// populated says whether a process is in the cgroup dir or below it
// (cgroup.events); unreadable counts as populated.
func populated(dir string) bool {
	v := keyed(readFile(filepath.Join(dir, "cgroup.events")), "populated")
	return v != 0
}
