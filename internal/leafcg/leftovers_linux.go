package leafcg

import (
	"fmt"
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

// Leftover is a session cgroup a killed launcher left.
type Leftover struct {
	Path    string
	Removed bool
	Err     error // why removing it failed
}

// removeLeftovers removes what launchers killed before their Remove (SIGKILL, an
// OOM kill, power loss) left in dir, the cgroup a launch is about to make its own
// in (leftoversIn).
func removeLeftovers(dir string) { leftoversIn(dir, false) }

// Leftovers finds, and unless dryRun removes, the session cgroups killed launchers
// left where this user's launches make them: in this process's cgroup and in the
// cgroups above it that are delegated to the user (delegation_linux.go's climb),
// for agentbox gc.
func Leftovers(dryRun bool) []Leftover {
	h, err := Probe()
	if err != nil || h.Own == "" {
		return nil
	}
	uid := os.Getuid()
	var out []Leftover
	for dir := h.Own; below(dir, h.Mount); dir = filepath.Dir(dir) {
		if uid != 0 && !ownedBy(dir, uid) {
			break
		}
		out = append(out, leftoversIn(dir, dryRun)...)
		if delegateMark(dir) || uid == 0 && !delegatedAbove(h, dir) {
			break
		}
	}
	return out
}

// delegatedAbove says whether a cgroup above dir, up to the root, carries
// systemd's delegation mark: root's climb goes that far and no further.
func delegatedAbove(h Host, dir string) bool {
	for d := filepath.Dir(dir); below(d, h.Mount); d = filepath.Dir(d) {
		if delegateMark(d) {
			return true
		}
	}
	return false
}

// leftoversIn finds in dir the session cgroups (agentbox-PID-N) of this user whose
// launcher is gone, that hold no process and are older than leftoverAge, and
// removes each with what is below it unless dryRun. A limited one keeps its limits
// and counts against cgroup.max.descendants until removed; one still holding
// processes is left alone (its session is not over).
func leftoversIn(dir string, dryRun bool) []Leftover {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	uid := os.Getuid()
	var out []Leftover
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
		l := Leftover{Path: p}
		if !dryRun {
			dirs := (&Leaf{Top: p}).tree()
			slices.Reverse(dirs)
			for _, d := range dirs {
				if err := unix.Rmdir(d); err != nil && err != unix.ENOENT && l.Err == nil {
					l.Err = fmt.Errorf("rmdir %s: %w", d, err)
				}
			}
			l.Removed = l.Err == nil
		}
		out = append(out, l)
	}
	return out
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
