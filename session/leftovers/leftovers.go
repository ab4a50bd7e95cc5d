// Package leftovers is the garbage collection of what a session leaves on the host
// when its launcher dies without cleaning up (SIGKILL, OOM, power loss) — the
// --disk-tmp directories, the push guard's staging, the session's cgroup — and the
// ownership claim that lets `agentbox gc` tell a dead session's leftovers from a
// live one's.
//
// Ownership cannot rest on the PID in a directory's name alone: PIDs are reused, and
// a reused PID would make a dead session's directory look alive forever. So a live
// launcher holds an exclusive flock(2) on a lock file beside each directory it owns
// (DIR.lock, outside the directory, where the sandbox cannot reach it). The kernel
// drops the lock when the launcher dies, however it dies. The lock file appears
// already locked (O_TMPFILE, locked, then linked into place), so gc never sees a lock
// file it could take from a live launcher. A directory with no lock file (made by a
// launcher before it claimed it, or by a release without claims) falls back to the
// PID in its name: alive means keep. That errs towards keeping, never removing.
//
// The HOME overlay's upper and work directories live on a tmpfs inside the sandbox's
// mount namespace (both backends): they vanish with it and leave nothing to collect.
package leftovers

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/gitguard/pushguard"
	"github.com/agentbox/agentbox/internal/leafcg"
	"github.com/agentbox/agentbox/internal/safepath"
)

// lockSuffix names the lock file beside an owned directory.
const lockSuffix = ".lock"

// Lock is a live launcher's claim on a host directory it made.
type Lock struct {
	f    *os.File
	path string // "": another user squatted the name, and the claim has none
}

// Claim makes dir+".lock" appear, already locked by this process. The lock lasts
// until Release or until the process dies.
func Claim(dir string) (*Lock, error) {
	path := dir + lockSuffix
	fd, err := unix.Open(filepath.Dir(path), unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
	if err == nil {
		f := os.NewFile(uintptr(fd), path)
		if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if err := unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), unix.AT_FDCWD, path, unix.AT_SYMLINK_FOLLOW); err != nil {
			if squatted(path) {
				return &Lock{f: f}, nil
			}
			f.Close()
			return nil, fmt.Errorf("create lock %s: %w", path, err)
		}
		return &Lock{f: f, path: path}, nil
	}
	if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EINVAL) {
		return nil, fmt.Errorf("create lock %s: %w", path, err)
	}
	// No O_TMPFILE on this filesystem: lock a hidden file, then rename it into place.
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".new-*")
	if err != nil {
		return nil, fmt.Errorf("create lock %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		os.Remove(f.Name())
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		os.Remove(f.Name())
		if squatted(path) {
			return &Lock{f: f}, nil
		}
		f.Close()
		return nil, fmt.Errorf("create lock %s: %w", path, err)
	}
	return &Lock{f: f, path: path}, nil
}

// squatted reports whether path holds what no launcher of this user made: anything
// but a regular file of ours. In a shared /tmp another user can put it there between
// the directory's creation and its claim; this user's gc does not take it for a
// claim (TakeLock), so the directory goes without one and its launcher's PID decides,
// instead of the launch losing what the directory is for.
func squatted(path string) bool {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return false
	}
	return st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != os.Getuid()
}

// Release removes the lock file, then drops the lock. Call it after the directory is
// gone, so that no unlocked lock file ever stands beside a directory still in use.
func (l *Lock) Release() {
	if l == nil {
		return
	}
	if l.path != "" {
		_ = os.Remove(l.path)
	}
	_ = l.f.Close()
}

// Leftover is one directory gc looked at.
type Leftover struct {
	Path    string
	Kind    string // "disk-tmp", "push-guard staging", CheckpointKind, SSHAgentKind or GitConfigCopyKind
	Live    bool   // a live session owns it: kept
	Removed bool
	Err     error // why removing it failed
}

// GCOptions say where to look.
type GCOptions struct {
	CacheDir string // the policy's CacheDir; its tmp/ holds the --disk-tmp dirs
	GuardDir string // where push-guard staging dirs live ("/tmp")
	DryRun   bool   // report, remove nothing
}

// GC finds the --disk-tmp directories and push-guard staging directories that no
// live session owns, and removes them (unless DryRun). It looks only at directories
// the calling user owns, and never follows a symlink.
func GC(opts GCOptions) ([]Leftover, error) {
	var out []Leftover
	if opts.CacheDir != "" {
		found, err := collect(filepath.Join(opts.CacheDir, "tmp"), "", "disk-tmp", opts.DryRun)
		if err != nil {
			return out, err
		}
		out = append(out, found...)
		out = append(out, collectGitConfigCopies(filepath.Join(opts.CacheDir, "gitconfig"), opts.DryRun, time.Now())...)
	}
	if opts.GuardDir != "" {
		found, err := collect(opts.GuardDir, pushguard.GuardStagePrefix, "push-guard staging", opts.DryRun)
		if err != nil {
			return out, err
		}
		out = append(out, found...)
		// The checkpoint endpoint's directory (session/checkpoint) and the
		// --ssh-agent filter's (session/netsvc), beside them.
		if found, err = collect(opts.GuardDir, CheckpointPrefix, CheckpointKind, opts.DryRun); err != nil {
			return out, err
		}
		out = append(out, found...)
		if found, err = collect(opts.GuardDir, SSHAgentPrefix, SSHAgentKind, opts.DryRun); err != nil {
			return out, err
		}
		out = append(out, found...)
	}
	// Session cgroups (internal/leafcg), where this user's launches make them.
	for _, c := range leafcg.Leftovers(opts.DryRun) {
		out = append(out, Leftover{Path: c.Path, Kind: CgroupKind, Removed: c.Removed, Err: c.Err})
	}
	return out, nil
}

// CgroupKind is the Kind of a session cgroup a killed launcher left.
const CgroupKind = "session cgroup"

// CheckpointPrefix names the checkpoint endpoint's directories below /tmp
// (PREFIX PID-RANDOM), claimed as the push guard's staging is.
const CheckpointPrefix = "agentbox-checkpoint-"

// CheckpointKind is the Kind of a checkpoint endpoint's directory.
const CheckpointKind = "checkpoint endpoint"

// SSHAgentPrefix names the --ssh-agent filter's directories below /tmp (PREFIX
// PID-RANDOM), claimed as the push guard's staging is.
const SSHAgentPrefix = "agentbox-ssh-"

// SSHAgentKind is the Kind of an --ssh-agent filter's directory.
const SSHAgentKind = "ssh-agent filter"

// CollectSSHAgent removes the --ssh-agent filter directories below dir that no
// live launcher owns, as GC does: a launch with --ssh-agent calls it, so that a
// killed launcher's directory goes without waiting for `agentbox gc`.
func CollectSSHAgent(dir string) {
	_, _ = collect(dir, SSHAgentPrefix, SSHAgentKind, false)
}

// collect handles every directory in parent whose name starts with prefix and
// carries a launcher PID (PID-...), and every stale lock file there.
func collect(parent, prefix, kind string, dryRun bool) ([]Leftover, error) {
	ents, err := os.ReadDir(parent)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("gc: read %s: %w", parent, err)
	}
	var out []Leftover
	uid := os.Geteuid()
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, prefix) || strings.HasPrefix(name, ".") {
			continue
		}
		path := filepath.Join(parent, name)
		if base, ok := strings.CutSuffix(name, lockSuffix); ok {
			// A lock file whose directory is gone: a launcher died between removing
			// its directory and releasing the lock.
			if _, err := os.Lstat(filepath.Join(parent, base)); errors.Is(err, fs.ErrNotExist) && !dryRun {
				if l, ok := TakeLock(path); ok {
					_ = os.Remove(path)
					l.Close()
				}
			}
			continue
		}
		pid, ok := launcherPID(strings.TrimPrefix(name, prefix))
		if !ok || !e.IsDir() || !ownedBy(path, uid) {
			continue
		}
		out = append(out, collectOne(path, kind, pid, dryRun))
	}
	return out, nil
}

// collectOne decides about one directory and removes it when no live session owns it.
// The lock, when taken, is held until the directory and its lock file are gone.
func collectOne(path, kind string, pid int, dryRun bool) Leftover {
	l := Leftover{Path: path, Kind: kind}
	lockPath := path + lockSuffix
	lock, taken := TakeLock(lockPath)
	switch {
	case lock == nil && taken:
		// No lock file: the PID decides, erring towards keeping.
		l.Live = pidAlive(pid)
	case lock == nil:
		l.Live = true // the lock is held: its launcher is alive
	}
	if l.Live || dryRun {
		if lock != nil {
			lock.Close()
		}
		return l
	}
	if err := safepath.RemoveAll(path); err != nil {
		l.Err = err
	} else {
		l.Removed = true
	}
	if lock != nil {
		if l.Removed {
			_ = os.Remove(lockPath)
		}
		lock.Close()
	}
	return l
}

// TakeLock tries the lock at path without waiting (a claim, or a pending audit's
// journal). It returns the locked file, or (nil, true) when there is no lock file
// of this user's (none, or one another user squatted: see squatted), or (nil, false)
// when someone holds it.
func TakeLock(path string) (*os.File, bool) {
	if squatted(path) {
		return nil, true
	}
	// Non-blocking, and only a regular file of ours: anyone can put a FIFO named
	// like a lock in /tmp, and gc must neither hang on it nor trust it.
	f, err := safepath.OpenRegular(path)
	if err != nil {
		return nil, errors.Is(err, fs.ErrNotExist)
	}
	return lockOpened(f)
}

// lockOpened takes the lock of a lock file TakeLock opened. Its holder removes the
// file before it lets go, so a lock taken after that is on a file no longer linked:
// whatever it guarded is done (a journal's audit has run), and taking it would do
// that work a second time.
func lockOpened(f *os.File) (*os.File, bool) {
	var st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) != nil || int(st.Uid) != os.Getuid() {
		f.Close()
		return nil, false
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, false
	}
	if unix.Fstat(int(f.Fd()), &st) != nil || st.Nlink == 0 {
		f.Close()
		return nil, true
	}
	return f, true
}

// launcherPID reads the PID at the start of a session directory's name (PID-...).
func launcherPID(rest string) (int, bool) {
	digits, _, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, false
	}
	pid, err := strconv.Atoi(digits)
	return pid, err == nil && pid > 0
}

// pidAlive reports whether a process with this PID exists (it may be another
// program that reused the PID: callers use this only to decide to keep).
func pidAlive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

func ownedBy(path string, uid int) bool {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return false
	}
	return int(st.Uid) == uid
}
