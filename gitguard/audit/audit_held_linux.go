package audit

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/hostpath"
	"github.com/agentbox/agentbox/internal/safepath"
)

// A directory the launcher bound writable is audited through a descriptor it
// opened at launch (Held), not through its path. A process that can write the
// parent (a second session granted it, or the session itself) can rename the
// directory away at the session's end and put a symlink or another directory at
// its path: an audit by path then read the decoy, or failed, and never looked at
// the directory the session wrote, wherever it now lay. Through the descriptor
// the scan reads that directory: every path below it is opened beneath the
// descriptor (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, or the O_NOFOLLOW
// walk), an lstat opens the path itself so (osLstat), and the other path-based
// calls go through /proc/self/fd/N of a parent opened so.
// The scan's paths are where the directory lies now, so that an absolute path a
// file of it names below its old path leads, as for the user's Git, to what took
// its place; Compare takes the baseline's paths (the launch's) for them.

// Held is a directory held open since the launch.
type Held struct {
	Path     string // where it lay when opened, as the baseline names its paths
	fd       int
	Dev, Ino uint64
	// Birth is its inode's birth time (statx, nanoseconds), 0 where the
	// filesystem keeps none: with Dev and Ino it tells the directory from one
	// made later that was given the same inode number.
	Birth int64
}

// DirID is a directory's identity as a Held has it, for a later process that
// has no descriptor (the pending-audit journal).
type DirID struct {
	Dev, Ino uint64
	Birth    int64
}

// Hold opens the directory at path (no symlink on the way) and keeps it.
func Hold(path string) (*Held, error) {
	fd, err := safepath.Open(path, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, err
	}
	h := &Held{Path: filepath.Clean(path), fd: fd, Dev: st.Dev, Ino: st.Ino}
	var stx unix.Statx_t
	if unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_BTIME, &stx) == nil && stx.Mask&unix.STATX_BTIME != 0 {
		h.Birth = stx.Btime.Sec*1_000_000_000 + int64(stx.Btime.Nsec)
	}
	return h, nil
}

// ID is the held directory's identity.
func (h *Held) ID() DirID { return DirID{Dev: h.Dev, Ino: h.Ino, Birth: h.Birth} }

// Is says whether the held directory is the one with identity id: the same
// device and inode, and the same birth time where both are known.
func (h *Held) Is(id DirID) bool {
	return h.Dev == id.Dev && h.Ino == id.Ino && (h.Birth == 0 || id.Birth == 0 || h.Birth == id.Birth)
}

// Close releases the descriptor.
func (h *Held) Close() {
	if h != nil && h.fd >= 0 {
		unix.Close(h.fd)
		h.fd = -1
	}
}

// errRemoved: the held directory was removed (it was empty then).
var errRemoved = errors.New("removed")

// Where is the path the directory has now: its /proc/self/fd link, the kernel's
// name for it (no symlink in it). It need not be reachable by that path (moved
// below a directory the user cannot search): the scan reads it through the
// descriptor all the same.
func (h *Held) Where() (string, error) {
	var st unix.Stat_t
	if err := unix.Fstat(h.fd, &st); err != nil {
		return "", err
	}
	if st.Nlink == 0 {
		return "", errRemoved // a directory keeps a link while it exists
	}
	now, err := os.Readlink(fdPath(h.fd))
	if err != nil {
		return "", err
	}
	if !filepath.IsAbs(now) {
		return "", fmt.Errorf("it lies where this process cannot name it (%s)", oneLine(now))
	}
	return filepath.Clean(now), nil
}

// top checks the top of a scan: repo, a directory, or held (when not nil), where
// it lies now; repo is then held's launch path.
func top(repo string, held *Held) (logical, now string, err error) {
	if held == nil {
		fi, err := os.Lstat(repo)
		if err == nil && !fi.IsDir() {
			err = errors.New("not a directory")
		}
		if err != nil {
			return repo, repo, fmt.Errorf("audit %s: %w", repo, err)
		}
		return repo, repo, nil
	}
	now, err = held.Where()
	if err != nil && !errors.Is(err, errRemoved) {
		err = fmt.Errorf("audit %s: %w", held.Path, err)
	}
	return held.Path, now, err
}

// heldAt is a held directory and where the scan found it.
type heldAt struct {
	h   *Held
	now string
}

// holder is the held directory the scan's path at lies in (the innermost), nil
// when none.
func (p place) holder(at string) *heldAt {
	var best *heldAt
	for i := range p.holds {
		h := &p.holds[i]
		if hostpath.Within(at, h.now) && (best == nil || len(h.now) > len(best.now)) {
			best = h
		}
	}
	return best
}

// heldGitDirs is opt.GitDirs with each of opt.HeldGitDirs where it lies now (a
// removed one left out: nothing of it is left to audit), those held with their
// present paths, and the ones moved (ScanOptions.MovedGitDirs).
func heldGitDirs(opt ScanOptions) (dirs []string, holds []heldAt, moved map[string]string, err error) {
	for _, g := range opt.GitDirs {
		g = filepath.Clean(g)
		var h *Held
		for _, c := range opt.HeldGitDirs {
			if c != nil && c.Path == g {
				h = c
			}
		}
		if h == nil {
			dirs = append(dirs, g)
			continue
		}
		now, err := h.Where()
		if err != nil && !errors.Is(err, errRemoved) {
			return nil, nil, nil, fmt.Errorf("audit %s: %w", g, err)
		}
		if now != g {
			if moved == nil {
				moved = map[string]string{}
			}
			moved[g] = now
		}
		if err == nil {
			dirs = append(dirs, now)
			holds = append(holds, heldAt{h: h, now: now})
		}
	}
	return dirs, holds, moved, nil
}

// maxMoves bounds the scans of a held directory that keeps being moved.
const maxMoves = 3

// movedAgain says whether a held directory was moved while it was read, and
// where it lies now.
func (s *scanner) movedAgain() (string, bool) {
	for _, h := range s.surface.holds {
		again, err := h.h.Where()
		if err != nil || again != h.now {
			return again, true
		}
	}
	return "", false
}

func fdPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// openPath is safepath.Open of the scan's path abs: beneath a held directory's
// descriptor when abs lies in one.
func (s *scanner) openPath(abs string, flags int) (int, error) {
	if h := s.surface.holder(abs); h != nil {
		return safepath.OpenBeneath(h.h.fd, strings.TrimPrefix(abs, h.now), flags)
	}
	return safepath.Open(abs, flags)
}

// sys is a path for a path-based system call (lstat, readlink, access) on the
// scan's path p that never follows a symlink on the way: in a held directory,
// /proc/self/fd/N/NAME of p's parent opened beneath it; done closes N.
func (s *scanner) sys(p string) (path string, done func(), err error) {
	h := s.surface.holder(p)
	if h == nil {
		return p, func() {}, nil
	}
	if p == h.now {
		return fdPath(h.h.fd) + "/.", func() {}, nil
	}
	fd, err := s.openPath(filepath.Dir(p), unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return "", nil, &os.PathError{Op: "open", Path: filepath.Dir(p), Err: err}
	}
	return fdPath(fd) + "/" + filepath.Base(p), func() { unix.Close(fd) }, nil
}

// osLstat is os.Lstat of the scan's path p (sys). In a held directory p is stat'ed
// beneath its descriptor in one lookup (safepath.LstatBeneath: the file sys names,
// by the same rules), where sys's way opens the parent and walks /proc and the
// parent again: the audit of .git is mostly such lstats. A failure other than a
// missing file takes sys's way, so that it is reported as before.
func (s *scanner) osLstat(p string) (os.FileInfo, error) {
	if h := s.surface.holder(p); h != nil {
		fi := &statInfo{name: filepath.Base(p)}
		err := safepath.LstatBeneath(h.h.fd, strings.TrimPrefix(p, h.now), &fi.st)
		switch {
		case err == nil:
			return fi, nil
		case errors.Is(err, unix.ENOENT):
			return nil, &os.PathError{Op: "lstat", Path: p, Err: unix.ENOENT}
		}
	}
	sp, done, err := s.sys(p)
	if err != nil {
		return nil, err
	}
	defer done()
	fi, err := os.Lstat(sp)
	if pe, ok := err.(*os.PathError); ok {
		pe.Path = p
	}
	return fi, err
}

// readlink is os.Readlink of the scan's path p (sys).
func (s *scanner) readlink(p string) string {
	sp, done, err := s.sys(p)
	if err != nil {
		return ""
	}
	defer done()
	link, _ := os.Readlink(sp)
	return link
}

// statInfo is the os.FileInfo of an lstat made through a descriptor, as os.Lstat
// gives it (its mode bits converted the same way, Sys the *syscall.Stat_t; a type
// Linux does not have would be fs.ModeIrregular, where os leaves it regular).
type statInfo struct {
	name string
	st   syscall.Stat_t
}

func (i *statInfo) Name() string       { return i.name }
func (i *statInfo) Size() int64        { return i.st.Size }
func (i *statInfo) ModTime() time.Time { return time.Unix(i.st.Mtim.Unix()) }
func (i *statInfo) IsDir() bool        { return i.Mode().IsDir() }
func (i *statInfo) Sys() any           { return &i.st }

func (i *statInfo) Mode() fs.FileMode {
	m := fs.FileMode(i.st.Mode&0o777) | modeType(i.st.Mode) // audit_dirents_linux.go
	if i.st.Mode&syscall.S_ISGID != 0 {
		m |= fs.ModeSetgid
	}
	if i.st.Mode&syscall.S_ISUID != 0 {
		m |= fs.ModeSetuid
	}
	if i.st.Mode&syscall.S_ISVTX != 0 {
		m |= fs.ModeSticky
	}
	return m
}
