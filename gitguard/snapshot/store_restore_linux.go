package snapshot

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/safepath"
)

// maxProblems is how many broken pieces a failed check names.
const maxProblems = 20

// restorer writes (or, with root nil, only checks) one stored snapshot.
type restorer struct {
	rs       *repoStore
	root     *os.Root // nil: check only
	buf      []byte
	problems []string
	skipped  []string
	entries  int
	dirs     []dirTime
	trees    map[string][]treeEntry
	bad      map[string]bool // trees that could not be read
}

type dirTime struct {
	dest  string
	mode  uint32
	mtime int64
}

func (r *restorer) problem(format string, a ...any) {
	if len(r.problems) < maxProblems {
		r.problems = append(r.problems, fmt.Sprintf(format, a...))
	} else if len(r.problems) == maxProblems {
		r.problems = append(r.problems, "…")
	}
}

// openStoredRecord opens the store that holds the record at recPath and reads the
// record; the caller closes the store.
func openStoredRecord(recPath string) (*repoStore, *Record, error) {
	rs, err := openRecordStore(recPath)
	if err != nil {
		return nil, nil, err
	}
	rec, err := readRecord(recPath)
	if err != nil {
		rs.close()
		return nil, nil, err
	}
	return rs, rec, nil
}

// openRecordStore finds the repository's part of the store a record belongs to
// (the record is KEY/snaps/NAME.snap) and takes its lock shared, so that no prune
// removes a blob while it is read.
func openRecordStore(recPath string) (*repoStore, error) {
	dir := filepath.Dir(filepath.Dir(recPath))
	if _, err := os.Lstat(filepath.Join(dir, "lock")); err != nil {
		return nil, fmt.Errorf("%s: not in a snapshot store (%v)", recPath, unwrapPath(err))
	}
	lf, err := lockStore(dir, unix.LOCK_SH)
	if err != nil {
		return nil, err
	}
	return &repoStore{dir: dir, lock: lf}, nil
}

// CheckStored reads every piece of the stored snapshot at recPath and checks it
// against its name: the record, each tree and each blob. A missing or changed
// piece is an error naming it.
func CheckStored(recPath string) (*Restored, error) {
	rs, rec, err := openStoredRecord(recPath)
	if err != nil {
		return nil, err
	}
	defer rs.close()
	r := &restorer{rs: rs, buf: make([]byte, copyBufSize), trees: map[string][]treeEntry{}, bad: map[string]bool{}}
	r.all(rec)
	if len(r.problems) > 0 {
		return nil, fmt.Errorf("%s: %s", recPath, strings.Join(r.problems, "; "))
	}
	return &Restored{Manifest: &rec.Manifest, Entries: r.entries, Skipped: r.skipped}, nil
}

// RestoreStored writes the stored snapshot at recPath into the directory into,
// which must not exist or be empty, in the layout Restore uses for a ZIP. Every
// tree and blob is checked against its name while it is written; when any piece is
// missing or changed, nothing is left behind and the error names the pieces. An
// entry that cannot be restored safely (a symlink leading out of its gitdir) is
// skipped and listed in Restored.Skipped.
func RestoreStored(recPath, into string) (*Restored, error) {
	rs, rec, err := openStoredRecord(recPath)
	if err != nil {
		return nil, err
	}
	defer rs.close()
	if into, err = filepath.Abs(into); err != nil {
		return nil, err
	}
	if err := checkTarget(into); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(into), "."+filepath.Base(into)+".restore-*")
	if err != nil {
		return nil, fmt.Errorf("restore into %s: %w", into, err)
	}
	fail := func(err error) (*Restored, error) {
		os.RemoveAll(tmp)
		return nil, err
	}
	root, err := os.OpenRoot(tmp)
	if err != nil {
		return fail(err)
	}
	defer root.Close()
	r := &restorer{rs: rs, root: root, buf: make([]byte, copyBufSize), trees: map[string][]treeEntry{}, bad: map[string]bool{}}
	r.all(rec)
	if len(r.problems) > 0 {
		return fail(fmt.Errorf("restore %s: %s; nothing was restored", recPath, strings.Join(r.problems, "; ")))
	}
	m, err := json.MarshalIndent(rec.Manifest, "", "  ")
	if err == nil {
		err = writeRootFile(root, "manifest.json", append(m, '\n'), 0o600)
	}
	if err == nil {
		err = r.finishDirs()
	}
	if err != nil {
		return fail(fmt.Errorf("restore into %s: %w", into, err))
	}
	if err := syscall.Rename(tmp, into); err != nil {
		os.RemoveAll(tmp)
		if errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("restore into %s: %w", into, ErrTargetNotEmpty)
		}
		return nil, fmt.Errorf("restore into %s: %w", into, err)
	}
	return &Restored{Dir: into, Manifest: &rec.Manifest, Entries: r.entries, Skipped: r.skipped}, nil
}

// all restores (or checks) the trees and the pointer file of rec.
func (r *restorer) all(rec *Record) {
	r.tree(rec.Common, ".git", 0)
	r.dirs = append(r.dirs, dirTime{dest: ".git", mode: rec.CommonMode | 0o700, mtime: rec.CommonMtime})
	if rec.Worktree != "" {
		r.tree(rec.Worktree, "git-worktree", 0)
		r.dirs = append(r.dirs, dirTime{dest: "git-worktree", mode: rec.WorktreeMode | 0o700, mtime: rec.WorktreeMtime})
	}
	if rec.DotGit != "" {
		r.file(treeEntry{kind: 'f', ref: rec.DotGit, size: -1, mode: rec.DotGitMode & 0o777, mtime: rec.Manifest.Time.UnixNano()}, "dotgit")
	}
}

func (r *restorer) readTree(h string) ([]treeEntry, bool) {
	if ents, ok := r.trees[h]; ok {
		return ents, !r.bad[h]
	}
	b, err := r.rs.readBlob(h, maxTree)
	if err != nil {
		r.problem("tree %v", err)
		r.trees[h], r.bad[h] = nil, true
		return nil, false
	}
	ents, err := parseTree(b)
	if err != nil {
		r.problem("tree %s: %v", h, err)
		r.trees[h], r.bad[h] = nil, true
		return nil, false
	}
	r.trees[h] = ents
	return ents, true
}

// tree restores the tree h at dest (slash-separated, below the restore dir).
func (r *restorer) tree(h, dest string, depth int) {
	if depth > maxTreeDepth {
		r.problem("%s: directories nested deeper than %d", dest, maxTreeDepth)
		return
	}
	ents, ok := r.readTree(h)
	if !ok {
		return
	}
	if r.root != nil {
		if err := r.root.Mkdir(dest, 0o700); err != nil {
			r.problem("mkdir %s: %v", dest, err)
			return
		}
	}
	seen := map[string]bool{}
	for _, e := range ents {
		if e.name == "" || e.name == "." || e.name == ".." || strings.ContainsAny(e.name, "/\x00") || seen[e.name] {
			r.problem("tree %s: entry %q: not a name a directory can hold twice or at all", h, e.name)
			continue
		}
		seen[e.name] = true
		child := dest + "/" + e.name
		r.entries++
		switch e.kind {
		case 'd':
			r.tree(e.ref, child, depth+1)
			r.dirs = append(r.dirs, dirTime{dest: child, mode: e.mode, mtime: e.mtime})
		case 'f':
			r.file(e, child)
		case 'l':
			if err := checkLinkTarget(child, e.ref); err != nil {
				r.skipped = append(r.skipped, fmt.Sprintf("%s: %v", child, err))
				continue
			}
			if r.root != nil {
				if err := r.root.Symlink(e.ref, child); err != nil {
					r.problem("symlink %s: %v", child, err)
				}
			}
		}
	}
}

// file restores one blob at dest, checking its size and hash on the way.
func (r *restorer) file(e treeEntry, dest string) {
	p := r.rs.blobPath(e.ref)
	f, err := safepath.OpenRegular(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			r.problem("%s: blob %s is missing from the store", dest, e.ref)
		} else {
			r.problem("%s: blob %s: %v", dest, e.ref, err)
		}
		return
	}
	defer f.Close()
	var out io.Writer = io.Discard
	var of *os.File
	if r.root != nil {
		of, err = r.root.OpenFile(dest, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
		if err != nil {
			r.problem("create %s: %v", dest, err)
			return
		}
		defer of.Close()
		out = of
	}
	h := sha256.New()
	n, err := io.CopyBuffer(io.MultiWriter(out, h), f, r.buf)
	if err != nil {
		r.problem("%s: blob %s: %v", dest, e.ref, err)
		return
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != e.ref || (e.size >= 0 && n != e.size) {
		r.problem("%s: blob %s changed in the store (%d bytes, SHA-256 %s)", dest, e.ref, n, got)
		return
	}
	if of != nil {
		if err := of.Chmod(fs.FileMode(e.mode & 0o777)); err != nil {
			r.problem("chmod %s: %v", dest, err)
		}
		if err := of.Close(); err != nil {
			r.problem("write %s: %v", dest, err)
		}
		mt := time.Unix(0, e.mtime)
		if err := r.root.Chtimes(dest, mt, mt); err != nil {
			r.problem("set times of %s: %v", dest, err)
		}
	}
}

// finishDirs sets directory modes and times, deepest first (a read-only directory
// is filled before it becomes read-only).
func (r *restorer) finishDirs() error {
	sort.Slice(r.dirs, func(i, j int) bool { return r.dirs[i].dest > r.dirs[j].dest })
	for _, d := range r.dirs {
		if err := r.root.Chmod(d.dest, fs.FileMode(d.mode&0o777)); err != nil {
			return fmt.Errorf("chmod %s: %w", d.dest, err)
		}
		mt := time.Unix(0, d.mtime)
		if err := r.root.Chtimes(d.dest, mt, mt); err != nil {
			return fmt.Errorf("set times of %s: %w", d.dest, err)
		}
	}
	return nil
}

func writeRootFile(root *os.Root, name string, b []byte, mode fs.FileMode) error {
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, mode)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// IsStoredSnapshot reports whether p names a snapshot record rather than a ZIP.
func IsStoredSnapshot(p string) bool { return strings.HasSuffix(path.Base(p), RecordSuffix) }
