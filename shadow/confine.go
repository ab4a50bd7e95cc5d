package shadow

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/kernel"
)

// A Git command that reads the working tree (`git add`, `status`, `check-ignore`)
// opens each file by its path below the work tree, a path the sandbox can still
// change while it runs: during a checkpoint, or another session's start or end
// record. A directory swapped for a symlink between Git's look at it and its
// open(2) makes Git read a file outside the repository — one the sandbox cannot
// see (--hide-secrets, the home directory's overlay) — and store it as the
// record's blob, which `agentbox undo --to` then writes into the working tree.
// So such a command runs in a Landlock domain that lets it read only below the
// work tree, the shadow repository and the directories Git itself comes from:
// the kernel refuses (EACCES) whatever a swapped path leads to elsewhere, and
// `git add --ignore-errors` goes on without it. Writes are not handled: Git
// writes the shadow repository only.

// confineWorkTree: work-tree Git commands are confined. A variable for the
// benchmark only, which measures them both ways.
var confineWorkTree = true

// landlockRead is LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR.
const landlockRead = unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_READ_DIR

// systemRoots are where a Git binary, its libraries and their data are read from.
var systemRoots = [...]string{"/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/etc", "/nix", "/gnu", "/opt"}

// readFiles are the files beside them a Git reads: /dev/null (the hardening's
// empty config and hooks), the kernel's random numbers (temporary file names)
// and the online CPUs (glibc's count, for Git's threads).
var readFiles = [...]string{"/dev/null", "/dev/urandom", "/dev/random", "/sys/devices/system/cpu/online", "/sys/devices/system/cpu/possible"}

// readRoots are the trees a work-tree Git of g may read: the work tree, the
// shadow repository, the system's, and the directory of the Git binary with its
// prefix (its parent), unless that prefix holds the shadow repository (a Git in
// ~/bin: the home directory is not the Git's to read whole).
func (g *git) readRoots() []string {
	roots := append([]string{g.workTree, g.gitDir}, systemRoots[:]...)
	bin := g.bin
	if r, err := filepath.EvalSymlinks(bin); err == nil {
		bin = r
	}
	dir := filepath.Dir(bin)
	roots = append(roots, dir)
	if prefix := filepath.Dir(dir); prefix != "/" && !strings.HasPrefix(g.gitDir+"/", prefix+"/") {
		roots = append(roots, prefix)
	}
	return roots
}

// startConfined starts c from an OS thread of its own that has entered a Landlock
// domain in which only roots (and readFiles) can be read; c inherits it at fork.
// The thread is never given back to the Go scheduler: it ends with its goroutine,
// which lives until release is called (the child's Pdeathsig follows the thread
// that forked it). A thread that ends kills every child it forked with a
// Pdeathsig, so the thread chosen is one that has no child (childlessThread): the
// sandbox's init, started by another goroutine, may have been forked from any of
// the launcher's threads. Without Landlock (ABI 0), or where no childless thread
// can be told, c starts as it would unconfined.
func startConfined(c *exec.Cmd, roots []string) (release func(), err error) {
	if kernel.LandlockABI() == 0 {
		return func() {}, c.Start()
	}
	started := make(chan error, 1)
	exited := make(chan struct{})
	go func() {
		ok := childlessThread(maxThreadTries, func() {
			if err := confineThread(roots); err != nil {
				started <- err
				return
			}
			started <- c.Start()
			<-exited
		})
		if !ok {
			started <- errNoChildlessThread
		}
	}()
	err = <-started
	if errors.Is(err, errNoChildlessThread) {
		return func() {}, c.Start()
	}
	if err != nil {
		close(exited)
		return nil, err
	}
	return func() { close(exited) }, nil
}

// maxThreadTries bounds the threads childlessThread looks at.
const maxThreadTries = 16

// errNoChildlessThread: no thread without children was found.
var errNoChildlessThread = errors.New("no OS thread without children")

// childlessThread runs f on an OS thread locked to it that has no child process,
// and leaves the thread locked: it ends when f's goroutine does. A thread with
// children is held (locked, by a goroutine waiting) while the next is tried, so
// that the scheduler hands out another, at most tries in all; false when none
// was found or /proc cannot tell (no /proc/thread-self/children).
func childlessThread(tries int, f func()) bool {
	runtime.LockOSThread()
	b, err := os.ReadFile("/proc/thread-self/children")
	if err == nil && len(bytes.TrimSpace(b)) == 0 {
		f() // never unlocked: the thread carries the domain
		return true
	}
	defer runtime.UnlockOSThread() // not confined: back to the scheduler
	if err != nil || tries <= 1 {
		return false
	}
	next := make(chan bool)
	go func() { next <- childlessThread(tries-1, f) }()
	return <-next
}

// confineThread sets no_new_privs on the calling thread (Landlock wants it of an
// unprivileged caller) and restricts it to reading below roots; a root that does
// not exist is left out.
func confineThread(roots []string) error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return err
	}
	// Handling any access denies linking and renaming across directories unless
	// a rule allows it (ABI 2): allowed below the roots, for Git's own writes.
	access := uint64(landlockRead)
	if kernel.LandlockABI() >= 2 {
		access |= kernel.LandlockAccessFSRefer
	}
	attr := kernel.LandlockRulesetAttr{HandledAccessFS: access}
	// Only the file-system field is handled: the size given stops before the
	// network and scope fields, which a kernel before ABI 4 does not know.
	fd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr.HandledAccessFS), 0)
	if errno != 0 {
		return errno
	}
	ruleset := int(fd)
	defer unix.Close(ruleset)
	add := func(path string, access uint64) error {
		pfd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil // not on this system
		}
		defer unix.Close(pfd)
		rule := unix.LandlockPathBeneathAttr{Allowed_access: access, Parent_fd: int32(pfd)}
		if _, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(ruleset), kernel.LandlockRulePathBeneath, uintptr(unsafe.Pointer(&rule)), 0, 0, 0); errno != 0 {
			return errno
		}
		return nil
	}
	for _, r := range roots {
		if err := add(r, access); err != nil {
			return err
		}
	}
	for _, f := range readFiles {
		if err := add(f, unix.LANDLOCK_ACCESS_FS_READ_FILE); err != nil {
			return err
		}
	}
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(ruleset), 0, 0); errno != 0 {
		return errno
	}
	return nil
}
