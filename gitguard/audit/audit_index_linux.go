package audit

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/gitguard"
	"github.com/agentbox/agentbox/gitguard/gitconfig"
)

// The index (the staging area) names paths of the working tree, and Git writes
// each entry's blob at its path when the operator discards changes (`git checkout
// -- .`, `git restore .`, `git checkout-index`, `git stash`), then runs the
// post-checkout hook. Git checks a path for a ".git" component when it adds it to
// the index, not when it reads an index file: an index the sandbox wrote with an
// entry ".git/hooks/post-checkout" made the operator's `git checkout -- .` write that
// hook and run it, on the host (Git 2.39). So every index of every Git directory the
// audit reads is read entry by entry (gitguard.UnsafeIndexPaths): a path with a
// ".git", "." or ".." component, or an absolute one, is a danger. A split index keeps
// its entries in the Git directory's sharedindex.* files, read the same way.

// KindIndex is a Git index file, or a split index's shared file.
const KindIndex ItemKind = "index"

// maxIndexSize bounds what the audit reads of one index: 100,000 files make about 10
// MB. A larger one is a danger, since it cannot be checked.
const maxIndexSize = 256 << 20

// indexFiles audits the index and the shared index files of gitdir dir, whose
// config entries (its own and its common dir's) are entries.
func (s *scanner) indexFiles(dir string, entries []gitconfig.Entry) {
	hashSize := 20 // SHA-1, unless the repository's object format is SHA-256
	for _, e := range entries {
		if e.Section == "extensions" && e.Key == "objectformat" && strings.EqualFold(e.Value, "sha256") {
			hashSize = 32
		}
	}
	s.indexFile(filepath.Join(dir, "index"), hashSize)
	for _, e := range s.listIfDir(dir) {
		if strings.HasPrefix(e.Name(), "sharedindex.") && !e.IsDir() {
			s.indexFile(filepath.Join(dir, e.Name()), hashSize)
		}
	}
}

// indexFile audits the index file p: a symlink is recorded as one (Git follows it),
// a file is read entry by entry.
func (s *scanner) indexFile(p string, hashSize int) {
	fi, err := s.lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err != nil {
		s.skip(p, "cannot inspect: %v", err)
		return
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		s.linkItem(p, KindIndex)
		return
	}
	// The fingerprint is the file's identity and times: an index's danger is what
	// Compare weighs, not its content (hashing a large one twice a session costs).
	var sum string
	if st, ok := fi.Sys().(*unix.Stat_t); ok {
		sum = fmt.Sprintf("%o:%d:%d:%d.%d", fi.Mode().Perm(), fi.Size(), st.Ino, st.Mtim.Sec, st.Mtim.Nsec)
	}
	it := s.add(&Item{Path: p, Kind: KindIndex, Sum: sum})
	bad, n, err := s.readIndex(p, hashSize)
	if err != nil {
		s.danger(it, fmt.Sprintf("cannot be read as an index, so cannot be checked (%v)%s", err, indexAfterMove))
		return
	}
	if n == 0 {
		return
	}
	named := make([]string, len(bad))
	for i, b := range bad {
		named[i] = oneLine(b)
		if b == "" {
			named[i] = `""` // an entry without a name
		}
	}
	more := ""
	if n > len(bad) {
		more = fmt.Sprintf(" and %d more", n-len(bad))
	}
	s.danger(it, fmt.Sprintf("names %s%s outside the working tree or inside a Git directory: git checkout -- . writes them there (a hook it then runs)%s", strings.Join(named, ", "), more, indexAfterMove))
}

// indexAfterMove tells the operator what to do once a dangerous index is moved out:
// without one, Git shows every tracked file deleted and untracked.
const indexAfterMove = "; once it is moved out, git reset rebuilds the index from HEAD (the working tree's files stay as they are)"

// readIndex reads the index file p (object ids of hashSize bytes), never following
// a symlink or blocking, and returns up to maxIndexNamed of the paths it names that
// Git must not write, and how many there are.
func (s *scanner) readIndex(p string, hashSize int) (bad []string, n int, err error) {
	fd, err := s.relax.Open(p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
	if err != nil {
		return nil, 0, err
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	fi, err := f.Stat()
	switch {
	case err != nil:
		return nil, 0, err
	case !fi.Mode().IsRegular():
		return nil, 0, fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
	case fi.Size() > maxIndexSize:
		return nil, 0, fmt.Errorf("larger than %d MiB", maxIndexSize>>20)
	}
	return gitguard.UnsafeIndexPaths(bufio.NewReaderSize(io.LimitReader(f, maxIndexSize), 64<<10), hashSize)
}
