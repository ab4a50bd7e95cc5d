// Package shadow is the shadow-repository collector: it records what each sandbox
// session did to the repository, as Git commits in a repository of agentbox's own
// below the state directory, where the sandbox cannot write.
//
// One shadow repository per recorded repository, at
// STATE/shadow/NAME-HASH.git (STATE is ${XDG_STATE_HOME:-$HOME/.local/state}/agentbox,
// NAME the repository's base name, HASH a hash of its canonical path). A session is a
// pair of commits: the working tree at launch (tracked and untracked files, honouring
// the repository's .gitignore files, .git excluded) and, as its child, the working
// tree at the end, whose message body is the session record (JSON). The ref
// refs/sessions/ID points at the newest of the two, so a session whose launcher died
// still shows, with its start state.
//
// Results of the benchmark harness and the kernel matrix live in STATE/shadow/results.git,
// one ref refs/results/ID each (see StoreResult).
//
// Git runs with a hardened invocation (git.go): the recorded repository's own Git
// configuration, hooks, attributes and filters never take effect, so nothing the
// sandbox wrote runs on the host. The persistent index in the shadow repository is
// Git's stat cache: recording costs in proportion to what changed, not to the size of
// the repository.
//
// Use it on the host, after the sandbox is gone; it is not for reading a repository
// that another process is still changing (the record would be a mix of two states).
package shadow

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/flock"
	"github.com/agentbox/agentbox/internal/hostpath"
	"github.com/agentbox/agentbox/internal/treewalk"
)

const (
	sessionRefs = "refs/sessions/"
	resultRefs  = "refs/results/"
	// repoFile in a shadow repository holds the recorded repository's path, for
	// listings across repositories.
	repoFile = "agentbox-repo"
	lockFile = "agentbox.lock"
)

// Store is one shadow repository.
type Store struct {
	Repo string // the recorded repository (canonical); "" for the results store
	Dir  string // the shadow repository (a bare Git directory)
	git  git    // Git without a work tree
	// Warn, when set, is told in one line each time a bound stopped a Git command
	// (bounds.go), so that the launcher can say it on stderr too.
	Warn func(string)
	// Progress, when set (a terminal), is told about long work: a first record.
	Progress io.Writer

	sweeps    int // full sweeps of the working tree staged (stage), for the tests
	inPlace   int // stagings done without Git (stageInPlace), for the tests
	preStaged int // batches of new files staged before a sweep (preStage), for the tests
	diffTrees int // diff-tree processes run (countChanges), for the tests
	// delta, when from is not "", is what the last stageWalk changed: the index
	// held tree from before it, and only files edited in place changed since.
	delta struct {
		from  string
		files Files
	}
	// indexRead: the last changedPaths read the index to tell what changed.
	indexRead bool
	// manyChanged: this staging's changedPaths found more files to stage than
	// maxChangedPaths (the sweep it falls back to gets a head start, prestage.go);
	// reset by each stageWalk, so that no earlier staging's answer carries over.
	manyChanged bool
	// leftOut: the last staging left a path out at a bound (addAll). The index
	// then holds less than the tree, and what was left out must be named again
	// each time: the next staging sweeps (no stage state is written).
	leftOut bool
	// addedClock is read just before the last staging's `git add` (changed.go).
	addedClock treewalk.Clock
	// recent are the entries the last in-place staging wrote (stageState.Recent).
	recent []recentEntry
	// deadline, when not zero, stops every Git command of the store's (the
	// record's deadline, price.go).
	deadline time.Time
	// byteBound, when not zero, bounds the content a staging reads (price.go).
	byteBound int64
	// skipped is what the last staging left out, and why; read is the bytes of
	// content it let be read (price.go).
	skipped []Skipped
	read    int64
}

// Dir is where the shadow repository of repo lives below stateDir: a readable base
// name and a hash of the canonical path, so two repositories with the same name do
// not share one.
func Dir(stateDir, repo string) string {
	sum := sha256.Sum256([]byte(repo))
	return filepath.Join(stateDir, "shadow", safeName(filepath.Base(repo))+"-"+hex.EncodeToString(sum[:8])+".git")
}

// safeName keeps letters, digits, '.', '_' and '-' of a base name (others become '_'),
// at most 40 bytes, never starting with a dot.
func safeName(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-', r == '.':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
		if b.Len() >= 40 {
			break
		}
	}
	name := strings.TrimLeft(b.String(), ".")
	if name == "" {
		name = "repo"
	}
	return name
}

// Open opens the shadow repository of repo (a canonical path) below stateDir,
// creating it on first use.
func Open(stateDir, repo string) (*Store, error) {
	if !filepath.IsAbs(repo) {
		return nil, fmt.Errorf("shadow: repository %s: not absolute", repo)
	}
	return open(stateDir, Dir(stateDir, repo), repo)
}

// open opens or creates the shadow repository dir for repo ("" for results).
func open(stateDir, dir, repo string) (*Store, error) {
	if !filepath.IsAbs(stateDir) {
		return nil, fmt.Errorf("shadow: state directory %q: not absolute", stateDir)
	}
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return nil, fmt.Errorf("shadow: create %s: %w", parent, err)
	}
	// The record must lie where the sandbox cannot write: were the state directory
	// inside the repository, the sandbox could rewrite the shadow repository's
	// config or hooks, and the collector would run them.
	canon, err := filepath.EvalSymlinks(parent)
	if err != nil {
		return nil, fmt.Errorf("shadow: resolve %s: %w", parent, err)
	}
	if repo != "" && hostpath.Within(canon, repo) {
		return nil, fmt.Errorf("shadow: state directory %s lies inside the repository %s, which the sandbox can write; set XDG_STATE_HOME elsewhere", stateDir, repo)
	}
	bin, err := findGit(repo)
	if err != nil {
		return nil, fmt.Errorf("shadow: %w", err)
	}
	dir = filepath.Join(canon, filepath.Base(dir))
	s := &Store{Repo: repo, Dir: dir, git: git{bin: bin, gitDir: dir}}
	s.git.deadline = &s.deadline
	if _, err := os.Stat(filepath.Join(dir, "HEAD")); err != nil {
		if err := s.create(); err != nil {
			return nil, err
		}
	}
	if err := ensureNoExec(dir); err != nil {
		return nil, err
	}
	return s, nil
}

// create initialises the shadow repository in a temporary directory and renames it
// into place, so a concurrent first use or an interrupted one never leaves a
// half-made repository behind.
func (s *Store) create() error {
	tmp, err := os.MkdirTemp(filepath.Dir(s.Dir), ".new-")
	if err != nil {
		return fmt.Errorf("shadow: create %s: %w", s.Dir, err)
	}
	defer os.RemoveAll(tmp)
	g := git{bin: s.git.bin, gitDir: tmp}
	// --template= copies no sample hooks; the shadow repository has no hooks at all.
	if _, err := g.run(nil, "init", "--quiet", "--bare", "--template="); err != nil {
		return fmt.Errorf("shadow: init %s: %w", s.Dir, err)
	}
	if err := os.MkdirAll(filepath.Join(tmp, "info"), 0o700); err != nil {
		return fmt.Errorf("shadow: init %s: %w", s.Dir, err)
	}
	files := map[string]string{"info/attributes": infoAttributes}
	if s.Repo != "" {
		files[repoFile] = s.Repo + "\n"
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(tmp, name), []byte(content), 0o600); err != nil {
			return fmt.Errorf("shadow: init %s: %w", s.Dir, err)
		}
	}
	if err := os.Rename(tmp, s.Dir); err != nil {
		if _, serr := os.Stat(filepath.Join(s.Dir, "HEAD")); serr == nil {
			return nil // another session created it first
		}
		return fmt.Errorf("shadow: create %s: %w", s.Dir, err)
	}
	return nil
}

// lock takes the shadow repository's lock, which every writer holds: two sessions on
// the same repository record one after the other, and the shared index is never
// written by two Git processes at once. It waits at most lockTimeout.
func (s *Store) lock() (unlock func(), err error) {
	path := filepath.Join(s.Dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("shadow: lock %s: %w", path, err)
	}
	// Bounded: the holder's Git commands are (bounds.go), so a holder that keeps it
	// longer is stuck, and this launch records nothing rather than wait for it.
	if err = flock.Wait(f, lockTimeout); err != nil {
		f.Close()
		return nil, fmt.Errorf("shadow: lock %s: %w", path, err)
	}
	// A Git lock file left by a process killed mid-write is stale: every writer
	// holds our lock, and we hold it now.
	for _, stale := range []string{"index.lock"} {
		if err := os.Remove(filepath.Join(s.Dir, stale)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			f.Close()
			return nil, fmt.Errorf("shadow: remove stale %s: %w", stale, err)
		}
	}
	return func() { f.Close() }, nil
}

// NewID is a new session id for a session started at t (Begin's when rec.ID is "").
func NewID(t time.Time) string { return newID(t) }

// newID is a session or result id: the UTC time of t to the second and 24 random
// bits, so ids sort by time and two sessions started in the same second differ.
func newID(t time.Time) string {
	var b [3]byte
	idBits(b[:])
	return t.UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b[:])
}

// idBits fills b from the kernel's pool, for uniqueness, not secrecy (no
// crypto/rand and its DRBG start-up), by the getrandom system call itself:
// unix.Getrandom goes through the vDSO, whose first call on a thread maps and
// touches the runtime's random state for it, about 0.2 ms on the launch's path
// before the placeholders (docs/performance.md, branch wt/perf5d). A failure leaves
// zeros: the time to the second still tells most ids apart.
func idBits(b []byte) {
	if len(b) > 0 {
		_, _, _ = unix.Syscall(unix.SYS_GETRANDOM, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), 0)
	}
}

// validID reports whether s can be (a prefix of) an id: it ends up in a ref pattern.
func validID(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if (r < '0' || r > '9') && (r < 'a' || r > 'f') && r != '-' {
			return false
		}
	}
	return true
}
