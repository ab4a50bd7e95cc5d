package shadow

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/safepath"
	"github.com/agentbox/agentbox/internal/treewalk"
)

// Staging only what changed (docs/promises.md P13: the record costs what the session
// changed). A full `git add --all` lstat's every tracked file and lists every
// directory: a sweep the size of `git status`. The audit walks the working tree
// anyway and lstat's every entry as it goes (treewalk.Walk), so the recorder takes
// what changed from that walk instead of sweeping again:
//
//   - stageFile records, after each complete staging, the clock read before the
//     walk (or the sweep) it staged from, and the identity of the index it left.
//     While the index is still that one, it holds the working tree as it was at that
//     moment, except for what changed since.
//   - Every change to an entry — its content, mode, type, a rename into place, a
//     hard link, a new file — sets its ctime to the kernel's clock, and nothing can
//     set a ctime back (utimensat sets atime and mtime only). So the entries of the
//     next walk whose ctime is at or after that clock are all that may have changed,
//     plus the tracked paths the walk no longer finds (removed).
//   - What cannot be told that way falls back to the full sweep: no stage file or
//     another index (a concurrent session staged, an older agentbox, a failure), an
//     incomplete walk (a bound, an unreadable directory), another boot, a wall clock
//     set back since (treewalk.Since), a changed or removed .gitignore at the top
//     (what it stopped ignoring is old), or more paths than maxChangedPaths.
//   - A filesystem whose ctimes have no sub-second part gets two seconds' margin.
//   - An entry in that window whose inode and ctime are still the ones the index
//     holds has not changed since, when its ctime is before the clock read just
//     before the last staging's `git add` (stageState.Added): that `git add`
//     lstat'ed it after the clock was read and took its content after the lstat,
//     and any later change would have stamped a ctime at or after the clock. A
//     file changed within the same clock tick is read and hashed instead
//     (sameContent), up to maxRacyRead. Without either, a file a session changed
//     just before its end would be staged again by each session in the window —
//     by every one, when an agent runs one per tool call.
//   - A staging that left a path out at a bound (a FIFO where Git reads, bounds.go)
//     writes no state: the next one sweeps, and names it again.
//
// Nested repositories are always staged again: their commit lives in their .git,
// which the walk does not lstat. A changed .gitignore below the top stages its
// whole directory (what it stops ignoring has old ctimes).

// stageFile, in the shadow repository, describes the index's state.
const stageFile = "agentbox-stage"

// maxChangedPaths bounds the pathspecs one limited `git add` gets; more and the
// full sweep is cheaper than Git's matching of each path against each pathspec.
const maxChangedPaths = 2000

// stageState is what stageFile holds.
type stageState struct {
	Clock treewalk.Clock `json:"clock"` // read before the walk or sweep the index was staged from
	// Added is read just before that staging's `git add` (zero: unknown): an index
	// entry whose ctime is before it was lstat'ed after it (see above).
	Added treewalk.Clock `json:"added"`
	Fine  bool           `json:"fine"`  // the filesystem stamps sub-second ctimes
	Tree  string         `json:"tree"`  // the index's tree
	Index fileID         `json:"index"` // the index file as it was left
	// Ignores is ignoreSet of the walk staged from ("" when there was none): a
	// .gitignore removed un-ignores old files, and when it was itself ignored (or
	// ignored by its parent) neither the index nor a ctime shows it went.
	Ignores string `json:"ignores,omitempty"`
	// Recent are the index's entries for the paths the last staging edited in
	// place (inplace.go): the ones most likely to fall in the next staging's clock
	// window, where only the index can tell whether they changed since. Looking
	// them up here saves reading a big tree's whole index at the start of the
	// session after one that changed files, and again at its end.
	// They are the index's as long as Index is (readStage).
	Recent []recentEntry `json:"recent,omitempty"`
}

// recentEntry is one index entry as stageState.Recent keeps it.
type recentEntry struct {
	Path  string `json:"path"`
	Ctime int64  `json:"ctime"`
	Ino   uint32 `json:"ino"`
	Mode  uint32 `json:"mode"`
	Size  uint32 `json:"size"`
	OID   string `json:"oid"`
}

// recentIndex returns the index entries of want from recent, when recent holds
// every one of them; ok false when the index must be read.
func recentIndex(recent []recentEntry, want map[string]bool) (map[string]indexEntry, bool) {
	if len(recent) < len(want) {
		return nil, false
	}
	got := make(map[string]indexEntry, len(want))
	for _, r := range recent {
		if !want[r.Path] {
			continue
		}
		var oid [20]byte
		if b, err := hex.DecodeString(r.OID); err != nil || len(b) != len(oid) {
			return nil, false
		} else {
			copy(oid[:], b)
		}
		got[r.Path] = indexEntry{path: r.Path, ctime: r.Ctime, ino: r.Ino, mode: r.Mode, size: r.Size, oid: oid}
	}
	return got, len(got) == len(want)
}

// ignoreSet is a digest of the paths of the .gitignore files w holds, "" when w
// cannot stand for the tree. If old is not empty, the digest covers only those
// with a ctime before old (the ones already there at the last staging).
func ignoreSet(w *treewalk.Walk, old int64) string {
	if w == nil || !w.Complete {
		return ""
	}
	h := sha256.New()
	for _, e := range w.Entries {
		// Not path.Base: its scan of every name of a big tree costs more.
		if isGitignore(e.Rel) && (old == 0 || e.Ctime < old) {
			h.Write([]byte(e.Rel))
			h.Write([]byte{0})
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// isGitignore says whether rel names a .gitignore file (as path.Base(rel) ==
// ".gitignore").
func isGitignore(rel string) bool {
	const name = ".gitignore"
	return strings.HasSuffix(rel, name) && (len(rel) == len(name) || rel[len(rel)-len(name)-1] == '/')
}

// fileID tells one version of a file from another.
type fileID struct {
	Ino, Size, MtimeNS, CtimeNS int64
}

func statID(p string) (fileID, bool) {
	fi, err := os.Lstat(p)
	if err != nil {
		return fileID{}, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, false
	}
	return fileID{Ino: int64(st.Ino), Size: st.Size, MtimeNS: st.Mtim.Nano(), CtimeNS: st.Ctim.Nano()}, true
}

// readStage returns the stage state when the index is still the one it describes.
func (s *Store) readStage() (stageState, bool) {
	var st stageState
	b, err := os.ReadFile(filepath.Join(s.Dir, stageFile))
	if err != nil || unmarshalStage(b, &st) != nil || st.Tree == "" {
		return st, false
	}
	id, ok := statID(filepath.Join(s.Dir, "index"))
	return st, ok && id == st.Index
}

// writeStage records that the index, as it is now, holds tree: the working tree as
// of clock. A failure removes the file (the next staging sweeps).
func (s *Store) writeStage(clock, added treewalk.Clock, fine bool, tree, ignores string, recent []recentEntry) {
	p := filepath.Join(s.Dir, stageFile)
	id, ok := statID(filepath.Join(s.Dir, "index"))
	if !ok || tree == "" || clock.Real == 0 {
		os.Remove(p)
		return
	}
	b := marshalStage(&stageState{Clock: clock, Added: added, Fine: fine, Tree: tree, Index: id, Ignores: ignores, Recent: recent})
	tmp := p + ".tmp"
	if os.WriteFile(tmp, b, 0o600) != nil || os.Rename(tmp, p) != nil {
		os.Remove(tmp)
		os.Remove(p)
	}
}

// dropStage forgets the stage state: the index is about to change in a way not
// described (the caller writes a new state after).
func (s *Store) dropStage() { os.Remove(filepath.Join(s.Dir, stageFile)) }

// errSweep: only a full sweep can tell what changed.
var errSweep = errors.New("full sweep needed")

// parent is the directory of a '/'-separated relative path, "" at the top.
func parent(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i]
	}
	return ""
}

// maxRacyRead bounds the files sameContent reads: beyond it, Git's add is cheaper
// than being wrong about the bound.
const maxRacyRead = 1 << 20

// sameContent reports whether the regular file e (below the repository's directory
// repoFd) is still the blob and mode the index holds, by reading and hashing it:
// the case of a file changed in the same clock tick as the last staging's `git
// add`, where its ctime alone cannot tell (changed.go). It never follows a symlink
// or blocks on what is not a regular file; anything unexpected says "not the same",
// and the path is staged as before.
func sameContent(repoFd int, e treewalk.Entry, ie indexEntry) bool {
	fd, err := safepath.OpenBeneath(repoFd, e.Rel, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY)
	if err != nil {
		return false
	}
	f := os.NewFile(uintptr(fd), e.Rel)
	defer f.Close()
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || uint32(st.Ino) != e.Ino ||
		st.Ctim.Nano() != e.Ctime || st.Size > maxRacyRead || uint32(st.Size) != ie.size {
		return false
	}
	mode := uint32(0o100644)
	if st.Mode&0o100 != 0 {
		mode = 0o100755
	}
	if mode != ie.mode {
		return false
	}
	b := make([]byte, st.Size+1)
	n, err := io.ReadFull(f, b)
	if int64(n) != st.Size || err != io.ErrUnexpectedEOF && !(err == io.EOF && n == 0) {
		return false
	}
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", n)
	h.Write(b[:n])
	return bytes.Equal(h.Sum(nil), ie.oid[:])
}
