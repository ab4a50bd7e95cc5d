package shadow

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/kernel"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// skipWithoutLandlock skips a test of the confinement on a kernel without
// Landlock (ABI 0), where the recorder's Git runs unconfined. The kernel matrix
// takes the gate of the scope Landlock's ABI 6 adds, which doctor measures: a
// kernel without Landlock lacks it too.
func skipWithoutLandlock(t *testing.T) {
	t.Helper()
	if kernel.LandlockABI() == 0 {
		testenv.SkipKernel(t, kernel.LandlockAbstractUnix, "no Landlock at all (ABI 0): the recorder's Git is not confined (docs/security.md)")
	}
}

// TestWorkTreeGitReadsOnlyTheRepository: a Git command that reads the working tree
// runs in a Landlock domain that lets it read the repository and the shadow
// repository, not a file elsewhere on the host; the same Git without a work tree
// (which reads no path the sandbox names) is not confined.
func TestWorkTreeGitReadsOnlyTheRepository(t *testing.T) {
	skipWithoutLandlock(t)
	repo := newRepo(t, map[string]string{"inside": "in\n"})
	outside := filepath.Join(t.TempDir(), "secret")
	write(t, outside, "the operator's\n")
	s, _ := openStore(t, repo)
	wt := s.git
	wt.workTree = repo
	if _, err := wt.run(nil, "hash-object", "--no-filters", "--", "inside"); err != nil {
		t.Fatalf("a work-tree Git cannot read the repository: %v", err)
	}
	if out, err := wt.run(nil, "hash-object", "--no-filters", "--", outside); err == nil {
		t.Fatalf("a work-tree Git read %s, outside the repository: %s", outside, out)
	}
	if _, err := s.git.run(nil, "hash-object", "--no-filters", "--", outside); err != nil {
		t.Fatalf("the shadow repository's own Git is confined too: %v", err)
	}
}

// TestCheckpointNeverStoresAFileOutsideTheRepository (P13): a checkpoint records
// the working tree while the sandbox runs. Directories of new files swapped, over
// and over, with symlinks to a directory outside the repository (one the sandbox
// cannot see) made Git's `git add` open its files through the symlink, between
// its look at the directory and its open(2): their content was stored as the
// step's blobs, which `agentbox undo --to` writes into the working tree. Without
// the confinement this fails in the first round.
//
// Where no thread without children can be told (no /proc/thread-self/children,
// or every thread has some), the checkpoint's Git starts from a thread kept
// confined: before, it ran unconfined there and stored the outside files.
func TestCheckpointNeverStoresAFileOutsideTheRepository(t *testing.T) {
	skipWithoutLandlock(t)
	for _, tc := range threadSeams() {
		t.Run(tc.name, func(t *testing.T) {
			tc.set(t)
			checkpointNeverReadsOutside(t)
		})
	}
}

// threadSeams are the ways a confined thread is found: by the kernel's list of
// its children; where the kernel keeps none (CONFIG_PROC_CHILDREN off); where
// every thread tried has children.
func threadSeams() []threadSeam {
	return []threadSeam{
		{"children listed", func(t *testing.T) {}},
		{"no thread-self children file", func(t *testing.T) {
			seamThreadChildren(t, func() ([]byte, error) { return nil, os.ErrNotExist })
		}},
		{"every thread with children", func(t *testing.T) {
			seamThreadChildren(t, func() ([]byte, error) { return []byte("1 "), nil })
		}},
	}
}

type threadSeam struct {
	name string
	set  func(t *testing.T)
}

func seamThreadChildren(t *testing.T, read func() ([]byte, error)) {
	readThreadChildren = read
	t.Cleanup(func() { readThreadChildren = procThreadChildren })
}

func checkpointNeverReadsOutside(t *testing.T) {
	repo := newRepo(t, map[string]string{"a": "1\n"})
	outside := t.TempDir()
	s, _ := openStore(t, repo)
	ss, err := s.BeginWalk(Record{Start: time.Now()}, walkOf(t, repo))
	if err != nil {
		t.Fatal(err)
	}
	const dirs, files = 8, 200
	secret := "outside content!\n" // the size of the decoy: Git reads what lstat said
	secretID := linkBlobID([]byte(secret))
	for round := range 3 {
		for i := range files {
			name := fmt.Sprintf("k%d-%d", round, i)
			write(t, filepath.Join(outside, name), secret)
			for d := range dirs {
				write(t, filepath.Join(repo, fmt.Sprintf("d%d", d), name), "inside decoy 17!\n")
			}
		}
		var stop atomic.Bool
		var swapping sync.WaitGroup
		for d := range dirs {
			dir, link := filepath.Join(repo, fmt.Sprintf("d%d", d)), filepath.Join(repo, fmt.Sprintf("l%d", d))
			if round == 0 {
				if err := os.Symlink(outside, link); err != nil {
					t.Fatal(err)
				}
			}
			swapping.Add(1)
			go func() {
				defer swapping.Done()
				for !stop.Load() {
					unix.Renameat2(unix.AT_FDCWD, dir, unix.AT_FDCWD, link, unix.RENAME_EXCHANGE)
				}
				if fi, err := os.Lstat(dir); err == nil && fi.Mode()&os.ModeSymlink != 0 {
					unix.Renameat2(unix.AT_FDCWD, dir, unix.AT_FDCWD, link, unix.RENAME_EXCHANGE)
				}
			}()
		}
		w := walkOf(t, repo)
		if round%2 == 0 {
			w = nil // the recorder sweeps
		}
		_, err := ss.Checkpoint("racing", w, 0)
		stop.Store(true)
		swapping.Wait()
		if err != nil {
			t.Logf("round %d: %v", round, err) // a checkpoint may fail; what matters is what it stored
		}
		if objs := shadowGit(t, s, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)"); strings.Contains(objs, secretID) {
			t.Fatalf("round %d: the content of a file outside the repository is in the shadow repository", round)
		}
	}
}

// BenchmarkConfinedGit is what the confinement costs a work-tree Git command: the
// same command started confined from a thread without children (which then
// ends), from the thread kept confined where none can be told, and plain,
// interleaved, each run's median.
//
//	go test ./shadow -run '^$' -bench ConfinedGit -benchtime 200x
func BenchmarkConfinedGit(b *testing.B) {
	repo := newRepo(b, map[string]string{"a": "1\n"})
	s, _ := openStore(b, repo)
	wt := s.git
	wt.workTree = repo
	var confined, kept, plain []time.Duration
	defer func() { confineWorkTree, readThreadChildren = true, procThreadChildren }()
	noChildrenFile := func() ([]byte, error) { return nil, os.ErrNotExist }
	run := func(confine bool, read func() ([]byte, error)) time.Duration {
		confineWorkTree, readThreadChildren = confine, read
		t0 := time.Now()
		if _, err := wt.run(nil, "rev-parse", "--git-dir"); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	for range b.N {
		confined = append(confined, run(true, procThreadChildren))
		kept = append(kept, run(true, noChildrenFile))
		plain = append(plain, run(false, procThreadChildren))
	}
	median := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2].Microseconds())
	}
	b.ReportMetric(median(confined), "confined-µs")
	b.ReportMetric(median(kept), "kept-µs")
	b.ReportMetric(median(plain), "plain-µs")
}

// TestConfinedGitKillsNoOtherChild: a thread that ends kills every child it
// forked with a Pdeathsig — the sandbox's init among them, started from whichever
// of the launcher's threads its goroutine ran on. Children started that way from
// eight threads outlive forty confined Git commands, each of which is refused a
// file outside the repository: with the kernel's list of a thread's children,
// without it (CONFIG_PROC_CHILDREN off), and where every thread has children;
// the two last keep one thread confined for the repository, never more.
func TestConfinedGitKillsNoOtherChild(t *testing.T) {
	skipWithoutLandlock(t)
	for _, tc := range threadSeams() {
		t.Run(tc.name, func(t *testing.T) {
			tc.set(t)
			confinedGitKillsNoOtherChild(t)
		})
	}
}

func confinedGitKillsNoOtherChild(t *testing.T) {
	repo := newRepo(t, map[string]string{"a": "1\n"})
	outside := filepath.Join(t.TempDir(), "secret")
	write(t, outside, "the operator's\n")
	s, _ := openStore(t, repo)
	wt := s.git
	wt.workTree = repo
	var kids []*exec.Cmd
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			c := exec.Command("sleep", "60")
			c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			if err := c.Start(); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			kids = append(kids, c)
			mu.Unlock()
		}()
	}
	wg.Wait()
	defer func() {
		for _, c := range kids {
			c.Process.Kill()
			c.Wait()
		}
	}()
	keptBefore := keptCount()
	for i := range 40 {
		if _, err := wt.run(nil, "hash-object", "--no-filters", "--", "a"); err != nil {
			t.Fatal(err)
		}
		if i%8 == 0 {
			if out, err := wt.run(nil, "hash-object", "--no-filters", "--", outside); err == nil {
				t.Fatalf("command %d: a work-tree Git read %s, outside the repository: %s", i, outside, out)
			}
		}
	}
	if n := keptCount() - keptBefore; n > 1 {
		t.Errorf("%d threads kept confined for one repository, want at most 1", n)
	}
	for _, c := range kids {
		if err := c.Process.Signal(syscall.Signal(0)); err != nil {
			t.Fatalf("a child started with a Pdeathsig from another thread is gone: %v", err)
		}
		var st unix.Siginfo
		if err := unix.Waitid(unix.P_PID, c.Process.Pid, &st, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil); err == nil && st.Signo != 0 {
			t.Fatalf("a child started with a Pdeathsig from another thread was killed (pid %d)", c.Process.Pid)
		}
	}
}

func keptCount() int {
	kept.Lock()
	defer kept.Unlock()
	return len(kept.threads)
}

// TestConfinementRefusedPastTheKeptThreads: where no thread without children can
// be told, each repository's Git gets a thread kept confined; past the bound on
// them a work-tree Git is refused, saying why, never run unconfined, while the
// repositories that have a kept thread go on.
func TestConfinementRefusedPastTheKeptThreads(t *testing.T) {
	skipWithoutLandlock(t)
	seamThreadChildren(t, func() ([]byte, error) { return nil, os.ErrNotExist })
	outside := filepath.Join(t.TempDir(), "secret")
	write(t, outside, "the operator's\n")
	workTreeGit := func() git {
		repo := newRepo(t, map[string]string{"a": "1\n"})
		s, _ := openStore(t, repo)
		wt := s.git
		wt.workTree = repo
		return wt
	}
	first, second := workTreeGit(), workTreeGit()
	kept.Lock()
	bound := maxKeptThreads
	maxKeptThreads = kept.n + 1
	kept.Unlock()
	defer func() { kept.Lock(); maxKeptThreads = bound; kept.Unlock() }()
	if _, err := first.run(nil, "hash-object", "--no-filters", "--", "a"); err != nil {
		t.Fatalf("the first repository's Git, with a thread kept for it: %v", err)
	}
	out, err := second.run(nil, "hash-object", "--no-filters", "--", outside)
	if err == nil {
		t.Fatalf("past the bound on kept threads a work-tree Git ran, and read %s outside its repository: %s", outside, out)
	}
	if !strings.Contains(err.Error(), "cannot confine the recorder's Git") {
		t.Errorf("past the bound: %v, want the refusal saying why", err)
	}
	if _, err := first.run(nil, "hash-object", "--no-filters", "--", "a"); err != nil {
		t.Fatalf("the first repository's Git after the refusal: %v", err)
	}
}

// TestKeptKeyCountsMissingRoots: a root that did not exist when a thread was
// confined is not in its domain; once it exists the same roots name another
// kept thread, not the one that cannot read it.
func TestKeptKeyCountsMissingRoots(t *testing.T) {
	dir := t.TempDir()
	later := filepath.Join(dir, "later")
	roots := []string{dir, later}
	before := rootsKey(roots)
	if err := os.Mkdir(later, 0o755); err != nil {
		t.Fatal(err)
	}
	if after := rootsKey(roots); after == before {
		t.Fatalf("a root made after the first confinement keeps the key %q", after)
	}
	if rootsKey(roots) != rootsKey(slices.Clone(roots)) {
		t.Fatal("the same roots name two keys")
	}
}

// TestKeptThreadFollowsAReplacedRepository: a kept thread's domain holds the
// directories its roots named when it was made (Landlock's rules are bound to
// inodes, not paths). A Go API program that outlives a repository removed and
// cloned again at the same path, or a shadow repository made again, must not
// start that path's Git from the old thread: it could read nothing there, and a
// checkpoint's `git add --ignore-errors` would go on without the files.
func TestKeptThreadFollowsAReplacedRepository(t *testing.T) {
	skipWithoutLandlock(t)
	seamThreadChildren(t, func() ([]byte, error) { return nil, os.ErrNotExist })
	repo := newRepo(t, map[string]string{"a": "1\n"})
	s, _ := openStore(t, repo)
	wt := s.git
	wt.workTree = repo
	if _, err := wt.run(nil, "hash-object", "--no-filters", "--", "a"); err != nil {
		t.Fatalf("before the repository was replaced: %v", err)
	}
	if err := os.RemoveAll(repo); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(repo, "a"), "2\n")
	out, err := wt.run(nil, "hash-object", "--no-filters", "--", "a")
	if err != nil {
		t.Fatalf("a Git of the repository made again at %s cannot read its file: %v", repo, err)
	}
	if want := linkBlobID([]byte("2\n")); strings.TrimSpace(string(out)) != want {
		t.Errorf("hash-object a = %q, want %s", out, want)
	}
}
