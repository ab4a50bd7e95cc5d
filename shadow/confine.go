package shadow

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
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

// startConfined starts c from an OS thread that has entered a Landlock domain in
// which only roots (and readFiles) can be read; c inherits it at fork. A confined
// thread is never given back to the Go scheduler: every goroutine it ran would be
// confined. It either ends, or is kept for the process's life.
//
// A thread that ends kills every child it forked with a Pdeathsig: the sandbox's
// init, started by another goroutine, may have been forked from any of the
// launcher's threads, and so may a Go API caller's own children. So a thread that
// ends is one with no child (childlessThread), ending with its goroutine once
// release is called (c's own Pdeathsig follows it). Where no such thread can be
// told (no /proc/thread-self/children, or every thread tried has children), c
// starts from a thread kept confined to roots for the process's life, which no
// end can reach (keptThread): one a set of roots (and the directories there),
// reused by each command of it.
// Never unconfined: a Git run unconfined could be led out of the work tree.
// Without Landlock (ABI 0) there is no domain to enter and c starts as it would
// unconfined (docs/security.md, "Limits").
func startConfined(c *exec.Cmd, roots []string) (release func(), err error) {
	if kernel.LandlockABI() == 0 {
		return func() {}, c.Start()
	}
	var key string
	if keptAny() {
		key = rootsKey(roots)
	}
	if k := keptFor(key); k != nil {
		return func() {}, k.start(c)
	}
	started := make(chan error, 1)
	exited := make(chan struct{})
	go func() {
		ok := childlessThread(maxThreadTries, func() {
			if err := confineThread(roots); err != nil {
				started <- err
				return // the thread ends: it has no child to take along
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
		k, err := keepThread(rootsKey(roots), roots)
		if err != nil {
			return nil, err
		}
		return func() {}, k.start(c)
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

// readThreadChildren is the children the calling thread forked, as the kernel
// lists them; a variable for the tests, which stand for a kernel without
// CONFIG_PROC_CHILDREN or a launcher whose every thread has children.
var readThreadChildren = procThreadChildren

func procThreadChildren() ([]byte, error) { return os.ReadFile("/proc/thread-self/children") }

// childlessThread runs f on an OS thread locked to it that has no child process,
// and leaves the thread locked: it ends when f's goroutine does. A thread with
// children is held (locked, by a goroutine waiting) while the next is tried, so
// that the scheduler hands out another, at most tries in all; false when none
// was found or /proc cannot tell (no /proc/thread-self/children).
func childlessThread(tries int, f func()) bool {
	runtime.LockOSThread()
	b, err := readThreadChildren()
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

// rootsKey tells apart the kept threads: each root's path and the identity of the
// directory there now. A domain's rules hold the directories its roots named when
// it was made, not their paths: a repository removed and cloned again at the same
// path (or a shadow repository made again) is none of its, and a thread keyed by
// path alone would start its Git reading nothing there, whose `git add
// --ignore-errors` then recorded the old tree as the new. A root missing now is
// keyed as missing, as confineThread leaves it out.
func rootsKey(roots []string) string {
	var b strings.Builder
	for _, r := range roots {
		var st unix.Stat_t
		if unix.Stat(r, &st) == nil {
			fmt.Fprintf(&b, "%s\x00%d:%d\x00", r, st.Dev, st.Ino)
		} else {
			fmt.Fprintf(&b, "%s\x00-\x00", r)
		}
	}
	return b.String()
}

// maxKeptThreads bounds the threads kept confined: one a set of roots, so one a
// repository (and Git) a process records. Past it a work-tree Git is refused
// rather than run unconfined. A variable for the test of that refusal.
var maxKeptThreads = 64

// keptThread is an OS thread kept confined to one set of roots for the process's
// life; its goroutine starts the commands sent to it.
type keptThread struct {
	starts chan keptStart
}

type keptStart struct {
	c    *exec.Cmd
	done chan error
}

// start starts c from the kept thread.
func (k *keptThread) start(c *exec.Cmd) error {
	done := make(chan error, 1)
	k.starts <- keptStart{c, done}
	return <-done
}

// kept holds the kept threads by their roots (rootsKey); n counts those
// made, with the threads a failed confinement left parked.
var kept struct {
	sync.Mutex
	threads map[string]*keptThread
	n       int
}

// keptAny: some thread is kept (the common case, where threads without children
// are told, has none, and looks no root up).
func keptAny() bool {
	kept.Lock()
	defer kept.Unlock()
	return len(kept.threads) > 0
}

// keptFor is the thread kept for key, or nil.
func keptFor(key string) *keptThread {
	kept.Lock()
	defer kept.Unlock()
	return kept.threads[key]
}

// keepThread makes the thread kept for key (or returns the one another caller
// made meanwhile): a goroutine that locks its thread, confines it to roots, and
// never ends. The thread may have forked children with a Pdeathsig before it was
// locked; as it never ends, they never get the signal from it.
func keepThread(key string, roots []string) (*keptThread, error) {
	kept.Lock()
	defer kept.Unlock()
	if k := kept.threads[key]; k != nil {
		return k, nil
	}
	if kept.n >= maxKeptThreads {
		return nil, fmt.Errorf("cannot confine the recorder's Git to the repository: this process keeps %d confined threads already (no thread without children could be told), and a Git run unconfined could be led to read files outside it", maxKeptThreads)
	}
	kept.n++
	ready := make(chan error, 1)
	k := &keptThread{starts: make(chan keptStart)}
	go func() {
		runtime.LockOSThread()
		if err := confineThread(roots); err != nil {
			ready <- err
			if errors.Is(err, errThreadUnchanged) {
				runtime.UnlockOSThread()
				return
			}
			select {} // half confined (no_new_privs): neither given back nor ended
		}
		ready <- nil
		for s := range k.starts {
			s.done <- s.c.Start()
		}
	}()
	if err := <-ready; err != nil {
		if errors.Is(err, errThreadUnchanged) {
			kept.n--
		}
		return nil, err
	}
	if kept.threads == nil {
		kept.threads = make(map[string]*keptThread)
	}
	kept.threads[key] = k
	return k, nil
}

// errThreadUnchanged wraps a failure of confineThread that left the calling
// thread as it was: the ruleset could not be made.
var errThreadUnchanged = errors.New("thread unchanged")

// confineThread restricts the calling thread to reading below roots; a root that
// does not exist is left out. The ruleset is made first, then the thread is set
// no_new_privs (Landlock wants it of an unprivileged caller) and restricted: an
// error wrapping errThreadUnchanged came before the thread was changed.
func confineThread(roots []string) error {
	ruleset, err := readRuleset(roots)
	if err != nil {
		return fmt.Errorf("%w: %w", errThreadUnchanged, err)
	}
	defer unix.Close(ruleset)
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("%w: no_new_privs: %w", errThreadUnchanged, err)
	}
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(ruleset), 0, 0); errno != 0 {
		return fmt.Errorf("landlock_restrict_self: %w", errno)
	}
	return nil
}

// readRuleset is a Landlock ruleset that allows reading below roots and
// readFiles, and nothing else the domain handles.
func readRuleset(roots []string) (int, error) {
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
		return -1, fmt.Errorf("landlock_create_ruleset: %w", errno)
	}
	ruleset := int(fd)
	add := func(path string, access uint64) error {
		pfd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil // not on this system
		}
		defer unix.Close(pfd)
		rule := unix.LandlockPathBeneathAttr{Allowed_access: access, Parent_fd: int32(pfd)}
		if _, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(ruleset), kernel.LandlockRulePathBeneath, uintptr(unsafe.Pointer(&rule)), 0, 0, 0); errno != 0 {
			return fmt.Errorf("landlock_add_rule %s: %w", path, errno)
		}
		return nil
	}
	for _, r := range roots {
		if err := add(r, access); err != nil {
			unix.Close(ruleset)
			return -1, err
		}
	}
	for _, f := range readFiles {
		if err := add(f, unix.LANDLOCK_ACCESS_FS_READ_FILE); err != nil {
			unix.Close(ruleset)
			return -1, err
		}
	}
	return ruleset, nil
}
