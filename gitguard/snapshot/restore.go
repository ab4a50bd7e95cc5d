package snapshot

import (
	"archive/zip"
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
)

// Where each part of a snapshot goes below the restore directory: the common dir
// becomes DIR/.git, so that for a plain repository DIR is at once a Git repository
// (with an empty work tree) whose .git can be moved back into place. A switch, not
// a map, so that no start of agentbox builds it; "" for any other name.
func restoreName(name string) string {
	switch name {
	case CommonPrefix:
		return ".git/"
	case WorktreePrefix:
		return "git-worktree/"
	case DotGitName:
		return "dotgit"
	case ManifestName:
		return "manifest.json"
	}
	return ""
}

// maxSymlinkTarget bounds a symlink entry's content.
const maxSymlinkTarget = 4096

// ErrTargetNotEmpty is returned when the restore directory exists and holds
// something: a restore never writes over existing files, least of all a live .git.
var ErrTargetNotEmpty = errors.New("exists and is not empty")

// Restored describes a finished restore.
type Restored struct {
	Dir      string    // the restore directory
	Manifest *Manifest // the snapshot's manifest
	Entries  int       // archive entries written
	Skipped  []string  // entries not restored, and why (a stored snapshot)
}

// entry is one validated archive entry and where it goes below the restore dir.
type entry struct {
	f    *zip.File
	dest string // slash-separated, relative to the restore dir
	kind fs.FileMode
	link string // symlink target
}

// Restore unpacks the snapshot at zipPath into the directory into, which must not
// exist or be empty. It validates the whole archive before writing anything: every
// name must be relative, free of "..", ".", empty components and NUL, belong to the
// snapshot layout, and not lie below a symlink of the archive; symlink targets must be
// relative and stay inside their own gitdir; only files, directories and symlinks are
// accepted. It writes into a hidden directory next to into and renames it into place
// when complete, so a failed restore leaves nothing behind. File and directory
// permission bits and modification times are restored (never setuid, setgid or
// sticky bits).
func Restore(zipPath, into string) (*Restored, error) {
	// Opened once, non-blocking, and read only when a regular file: a FIFO or
	// device in the ZIP's place must neither hang the restore nor feed it.
	f, err := os.OpenFile(zipPath, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err // names the path already
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file (%s)", zipPath, fi.Mode().Type())
	}
	zr, err := zip.NewReader(f, fi.Size())
	if err != nil && !errors.Is(err, zip.ErrInsecurePath) {
		if errors.Is(err, zip.ErrFormat) {
			return nil, fmt.Errorf("%s: not a ZIP file: %w", zipPath, err)
		}
		return nil, fmt.Errorf("%s: %w", zipPath, err)
	}
	m, ents, err := validateArchive(zr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", zipPath, err)
	}
	into, err = filepath.Abs(into)
	if err != nil {
		return nil, err
	}
	if err := checkTarget(into); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(into), "."+filepath.Base(into)+".restore-*")
	if err != nil {
		return nil, fmt.Errorf("restore into %s: %w", into, err)
	}
	if err := unpack(tmp, ents); err != nil {
		os.RemoveAll(tmp)
		return nil, fmt.Errorf("restore into %s: %w", into, err)
	}
	// rename(2) replaces an empty directory and fails on a non-empty one, so a file
	// that appeared in into meanwhile is not overwritten either. (os.Rename refuses
	// every existing directory, hence the system call.)
	if err := syscall.Rename(tmp, into); err != nil {
		os.RemoveAll(tmp)
		if errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("restore into %s: %w", into, ErrTargetNotEmpty)
		}
		return nil, fmt.Errorf("restore into %s: %w", into, err)
	}
	return &Restored{Dir: into, Manifest: m, Entries: len(ents)}, nil
}

// checkTarget accepts a missing path or an empty directory (not a symlink).
func checkTarget(into string) error {
	fi, err := os.Lstat(into)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("restore into %s: %w", into, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("restore into %s: %w", into, ErrTargetNotEmpty)
	}
	d, err := os.Open(into)
	if err != nil {
		return fmt.Errorf("restore into %s: %w", into, err)
	}
	defer d.Close()
	if names, _ := d.Readdirnames(1); len(names) > 0 {
		return fmt.Errorf("restore into %s: %w", into, ErrTargetNotEmpty)
	}
	return nil
}

// validateArchive checks every entry and returns the manifest and the entries in
// archive order.
func validateArchive(zr *zip.Reader) (*Manifest, []entry, error) {
	var m *Manifest
	var ents []entry
	seen := map[string]bool{}
	links := map[string]bool{}
	for _, f := range zr.File {
		e, err := classify(f)
		if err != nil {
			return nil, nil, err
		}
		if seen[e.dest] {
			return nil, nil, fmt.Errorf("entry %q: appears twice", f.Name)
		}
		seen[e.dest] = true
		if e.kind == fs.ModeSymlink {
			links[e.dest] = true
		}
		if f.Name == ManifestName {
			if m, err = readManifestEntry(f); err != nil {
				return nil, nil, err
			}
		}
		ents = append(ents, e)
	}
	if m == nil {
		return nil, nil, fmt.Errorf("no %s: not an agentbox snapshot", ManifestName)
	}
	for _, e := range ents {
		for p := path.Dir(e.dest); p != "." && p != "/"; p = path.Dir(p) {
			if links[p] {
				return nil, nil, fmt.Errorf("entry %q: lies below the symlink %q", e.f.Name, p)
			}
		}
	}
	return m, ents, nil
}

func readManifestEntry(f *zip.File) (*Manifest, error) {
	rc, err := f.Open()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", ManifestName, err)
	}
	defer rc.Close()
	return ReadManifest(rc)
}

// classify validates one entry's name and type and maps it into the restore layout.
func classify(f *zip.File) (entry, error) {
	name := f.Name
	bad := func(why string) (entry, error) { return entry{}, fmt.Errorf("entry %q: %s", name, why) }
	mode := f.Mode()
	e := entry{f: f}
	switch {
	case mode.IsDir():
		e.kind = fs.ModeDir
	case mode&fs.ModeSymlink != 0:
		e.kind = fs.ModeSymlink
	case mode.IsRegular():
	default:
		return bad("neither file, directory nor symlink")
	}
	if name == "" || len(name) > 4096 || strings.ContainsRune(name, 0) || strings.HasPrefix(name, "/") {
		return bad("not a relative path")
	}
	clean := strings.TrimSuffix(name, "/")
	if strings.HasSuffix(name, "/") != (e.kind == fs.ModeDir) {
		return bad("directory name and type disagree")
	}
	for _, c := range strings.Split(clean, "/") {
		if c == "" || c == "." || c == ".." {
			return bad(`has an empty, "." or ".." component`)
		}
	}
	// The layout: two trees and two files, nothing else.
	switch {
	case name == ManifestName || name == DotGitName:
		if e.kind != 0 {
			return bad("must be a regular file")
		}
		e.dest = restoreName(name)
	case name == CommonPrefix || name == WorktreePrefix:
		if e.kind != fs.ModeDir {
			return bad("must be a directory")
		}
		e.dest = strings.TrimSuffix(restoreName(name), "/")
	case strings.HasPrefix(name, CommonPrefix):
		e.dest = restoreName(CommonPrefix) + strings.TrimPrefix(clean, CommonPrefix)
	case strings.HasPrefix(name, WorktreePrefix):
		e.dest = restoreName(WorktreePrefix) + strings.TrimPrefix(clean, WorktreePrefix)
	default:
		return bad("not part of an agentbox snapshot")
	}
	if e.kind == fs.ModeSymlink {
		target, err := readLinkEntry(f)
		if err != nil {
			return entry{}, err
		}
		if err := checkLinkTarget(e.dest, target); err != nil {
			return bad(err.Error())
		}
		e.link = target
	}
	return e, nil
}

func readLinkEntry(f *zip.File) (string, error) {
	if f.UncompressedSize64 > maxSymlinkTarget {
		return "", fmt.Errorf("entry %q: symlink target longer than %d bytes", f.Name, maxSymlinkTarget)
	}
	rc, err := f.Open()
	if err != nil {
		return "", fmt.Errorf("entry %q: %w", f.Name, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxSymlinkTarget+1))
	if err != nil {
		return "", fmt.Errorf("entry %q: %w", f.Name, err)
	}
	return string(b), nil
}

// checkLinkTarget accepts a symlink target only when it cannot lead out of the gitdir
// the link belongs to, whatever other links of the archive point at: it must be
// relative, climb with leading ".." components no higher than the gitdir's top, and
// never use ".." after a normal component (where a link to "." or a deeper directory
// would make a lexical check lie).
func checkLinkTarget(dest, target string) error {
	if target == "" || strings.ContainsRune(target, 0) {
		return errors.New("empty symlink target")
	}
	if strings.HasPrefix(target, "/") {
		return fmt.Errorf("symlink to the absolute path %q", target)
	}
	// Depth of the link's directory inside its tree (".git/a/b/link": 2).
	depth := strings.Count(dest, "/") - 1
	climbing := true
	for _, c := range strings.Split(target, "/") {
		switch {
		case c == "..":
			if !climbing {
				return fmt.Errorf("symlink target %q uses \"..\" after a directory name", target)
			}
			depth--
			if depth < 0 {
				return fmt.Errorf("symlink target %q leads out of the Git directory", target)
			}
		case c == "" || c == ".":
		default:
			climbing = false
		}
	}
	return nil
}

// unpack writes the validated entries below dir.
func unpack(dir string, ents []entry) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	var dirs []entry
	for _, e := range ents {
		if err := unpackOne(root, e); err != nil {
			return err
		}
		if e.kind == fs.ModeDir {
			dirs = append(dirs, e)
		}
	}
	// Directory modes last, deepest first: a read-only directory must be filled
	// before it becomes read-only, and setting a child's time touches no parent.
	sort.Slice(dirs, func(i, j int) bool { return dirs[i].dest > dirs[j].dest })
	for _, e := range dirs {
		if err := root.Chmod(e.dest, e.f.Mode().Perm()); err != nil {
			return fmt.Errorf("chmod %s: %w", e.dest, err)
		}
		if err := root.Chtimes(e.dest, time.Time{}, e.f.Modified); err != nil {
			return fmt.Errorf("set times of %s: %w", e.dest, err)
		}
	}
	return nil
}

func unpackOne(root *os.Root, e entry) error {
	switch e.kind {
	case fs.ModeDir:
		if err := root.MkdirAll(e.dest, 0o700); err != nil {
			return fmt.Errorf("mkdir %s: %w", e.dest, err)
		}
		return nil
	case fs.ModeSymlink:
		if err := mkParent(root, e.dest); err != nil {
			return err
		}
		if err := root.Symlink(e.link, e.dest); err != nil {
			return fmt.Errorf("symlink %s: %w", e.dest, err)
		}
		return nil
	}
	if err := mkParent(root, e.dest); err != nil {
		return err
	}
	perm := e.f.Mode().Perm()
	out, err := root.OpenFile(e.dest, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("create %s: %w", e.dest, err)
	}
	defer out.Close()
	rc, err := e.f.Open()
	if err != nil {
		return fmt.Errorf("read entry %q: %w", e.f.Name, err)
	}
	defer rc.Close()
	// The zip reader checks the size and CRC-32 at the end of the entry.
	if _, err := io.Copy(out, rc); err != nil {
		return fmt.Errorf("write %s: %w", e.dest, err)
	}
	if err := out.Chmod(perm); err != nil {
		return fmt.Errorf("chmod %s: %w", e.dest, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("write %s: %w", e.dest, err)
	}
	if err := root.Chtimes(e.dest, time.Time{}, e.f.Modified); err != nil {
		return fmt.Errorf("set times of %s: %w", e.dest, err)
	}
	return nil
}

func mkParent(root *os.Root, dest string) error {
	if p := path.Dir(dest); p != "." {
		if err := root.MkdirAll(p, 0o700); err != nil {
			return fmt.Errorf("mkdir %s: %w", p, err)
		}
	}
	return nil
}
