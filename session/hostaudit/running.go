package hostaudit

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/gitguard/audit"
)

// HoldRepo is for host-side writers of a repository's working tree (agentbox undo):
// it takes the repository's audit lock, which every launch takes for its baseline,
// so that no session starts meanwhile, then refuses when a session of the
// repository is running (its pending-audit journal is locked by its live launcher).
// release lets launches go on.
func HoldRepo(stateDir, repo string) (release func(), err error) {
	if _, err := journalDir(stateDir, repo); err != nil {
		return nil, err
	}
	dir := filepath.Join(stateDir, "audit-locks")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, auditLockName(repo))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, errors.New("a session of this repository is starting or being audited; wait for it and try again")
	}
	if pids := runningPIDs(stateDir, repo); len(pids) > 0 {
		f.Close()
		return nil, fmt.Errorf("a session is running on this repository (launcher PID %s); wait for it to end", strings.Join(pids, ", "))
	}
	return func() { f.Close() }, nil
}

// runningPIDs are the launcher PIDs of the sessions of repo, by this path or
// another to the same directory (sameDirElsewhere), whose journal a live launcher
// holds locked.
func runningPIDs(stateDir, repo string) []string {
	var pids []string
	dir, err := journalDir(stateDir, repo)
	if err != nil {
		return nil
	}
	held, _ := audit.Hold(repo)
	defer held.Close()
	pendingJournals(stateDir, repo, func(name string, j *auditJournal) {
		ours := strings.HasPrefix(name, journalPrefix(repo)) && (j == nil || j.Repo == repo)
		if !ours && (j == nil || !sameDirElsewhere(stateDir, repo, name, j, held)) {
			return
		}
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
		if err != nil {
			return
		}
		defer f.Close()
		if unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB) != nil {
			// HASH-PID-N.journal (HASH-PID.journal, .json before wt/red25g)
			pid, _, _ := strings.Cut(strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(name, journalPrefix(repo)), journalSuffix), ".json"), "-")
			if _, err := strconv.Atoi(pid); err != nil {
				pid = "?"
			}
			if !ours {
				pid = strconv.Itoa(j.PID)
			}
			pids = append(pids, pid)
		}
	})
	return pids
}
