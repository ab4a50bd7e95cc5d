// Package snapshot saves the repository's Git metadata before a session (docs/promises.md
// P8) into a content-addressed store outside the sandbox's reach, keeps it within a
// count and a byte budget, and restores or checks a saved snapshot end to end. The
// store's bounds leave an entry out and name it instead of failing the launch.
package snapshot

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/gitguard"
	"github.com/agentbox/agentbox/internal/safepath"
)

// The layout of a snapshot as restored, and of the ZIPs older versions wrote
// (docs/promises.md P8).
const (
	ManifestName   = "manifest.json" // the Manifest, as JSON
	CommonPrefix   = "git-common/"   // the Git common dir (for a plain repository: .git)
	WorktreePrefix = "git-worktree/" // a linked worktree's own gitdir, when it differs from the common dir
	DotGitName     = "dotgit"        // the work tree's ".git" pointer file, when .git is a file

	// DefaultKeep is how many snapshots of one repository retention keeps.
	DefaultKeep = 20
)

// SnapshotOptions say what to save and where.
type SnapshotOptions struct {
	Repo    string    // the work tree: absolute, canonical (policy.Policy.Repo)
	Dir     string    // the store, absolute
	Keep    int       // snapshots of this repository kept after a new one; 0 keeps all
	Version string    // agentbox's version, recorded in the manifest
	Now     time.Time // the snapshot's time; zero is time.Now()
	// MaxBytes bounds the bytes of file content archived; 0 is DefaultMaxBytes.
	// MaxEntries bounds files, directories and symlinks; 0 is DefaultMaxEntries.
	// A sandbox can fill .git with anything; each later launch archives it, so
	// beyond these the snapshot fails (and the launch with it) rather than
	// spending the disk and the hour on it.
	MaxBytes   int64
	MaxEntries int
	// KeepBytes bounds the distinct bytes the kept snapshots of the repository use
	// in the store; older snapshots beyond it are removed (the newest never). 0: no
	// byte budget.
	KeepBytes int64
	// Progress, when set (a terminal), shows a long save's progress.
	Progress io.Writer
}

// Default snapshot bounds: far above the metadata of large repositories (tens of
// GiB of packs need --git-save-max-size), far below what fills a disk by surprise.
const (
	DefaultMaxBytes   = 8 << 30
	DefaultMaxEntries = 2_000_000
)

// ErrSnapshotTooLarge is wrapped by the error of a snapshot beyond its bounds.
var ErrSnapshotTooLarge = errors.New("the Git metadata exceeds the snapshot's bounds")

// Snapshot is a snapshot that was written.
type Snapshot struct {
	Path     string   // the snapshot's record in the store
	Manifest Manifest // what manifest.json says
	Pruned   []string // older snapshots of the same repository removed by retention
	PruneErr error    // retention failed; the new snapshot is complete all the same
	Skipped  []string // entries not saved, and why (a stored snapshot)
	NewBytes int64    // content bytes this save read and stored (a stored snapshot)
	// Unchanged: the metadata was exactly what the record at Path describes, and
	// the save wrote nothing (a stored snapshot; store_unchanged_linux.go).
	Unchanged bool
}

// layout is where a work tree keeps its Git metadata.
type layout struct {
	gitDir    string // the gitdir of the work tree (repo/.git, or a "gitdir:" target)
	commonDir string // the common dir; gitDir itself unless gitDir/commondir says otherwise
	dotGit    string // repo/.git when it is a pointer file, else ""
}

// locateGit finds the Git metadata of the work tree at repo. ok is false when repo is
// not a Git work tree: no .git, or a .git that does not lead to a gitdir with a HEAD.
// It reads files only; running git could run the repository's own configuration.
func locateGit(repo string) (l layout, ok bool, err error) {
	gitDir, err := gitguard.FindGitDir(repo)
	if err != nil || gitDir == "" {
		return l, false, err
	}
	fi, err := os.Lstat(filepath.Join(gitDir, "HEAD"))
	switch {
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR):
		return l, false, nil
	case err != nil:
		return l, false, fmt.Errorf("inspect %s: %w", filepath.Join(gitDir, "HEAD"), err)
	case !fi.Mode().IsRegular() && fi.Mode()&fs.ModeSymlink == 0:
		return l, false, nil
	}
	l.gitDir, l.commonDir = gitDir, gitDir
	if dotgit := filepath.Join(repo, ".git"); gitDir != dotgit {
		l.dotGit = dotgit
	}
	if fi, err := os.Lstat(filepath.Join(gitDir, "commondir")); err == nil {
		if !fi.Mode().IsRegular() {
			return l, false, fmt.Errorf("%s is not a regular file", filepath.Join(gitDir, "commondir"))
		}
		common := gitguard.ReadCommonDir(gitDir)
		if common == "" {
			return l, false, fmt.Errorf("read %s: empty or unreadable", filepath.Join(gitDir, "commondir"))
		}
		l.commonDir = common
	}
	if fi, err := os.Stat(l.commonDir); err != nil || !fi.IsDir() {
		return l, false, fmt.Errorf("common dir %s (named by %s/commondir) is not a directory", l.commonDir, gitDir)
	}
	return l, true, nil
}

// syncDir makes the new directory entry durable. A failure is not reported: the data
// is synced, and some filesystems refuse fsync on directories.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return s != ""
}

// resolveHead returns HEAD as written (a "ref: …" line or a commit id) and, when it
// can be resolved through loose or packed refs, the commit it names ("" for an unborn
// branch or a ref backend it cannot read, such as reftable).
func resolveHead(gitDir, commonDir string) (head, commit string) {
	b, err := readRefFile(filepath.Join(gitDir, "HEAD"))
	if err != nil {
		return "", ""
	}
	head, _, _ = strings.Cut(strings.TrimSpace(string(b)), "\n")
	v := head
	for range 10 {
		ref, ok := strings.CutPrefix(v, "ref: ")
		if !ok {
			break
		}
		ref = strings.TrimSpace(ref)
		if !strings.HasPrefix(ref, "refs/") || strings.Contains(ref, "..") || strings.ContainsRune(ref, 0) {
			return head, ""
		}
		v = lookupRef(gitDir, commonDir, ref)
	}
	if (len(v) == 40 || len(v) == 64) && isHex(v) {
		return head, v
	}
	return head, ""
}

// lookupRef returns the content of a loose ref or its packed-refs value, or "".
// Per-worktree refs live in the worktree's gitdir, all others in the common dir.
func lookupRef(gitDir, commonDir, ref string) string {
	dir := commonDir
	for _, p := range []string{"refs/worktree/", "refs/bisect/", "refs/rewritten/"} {
		if strings.HasPrefix(ref, p) {
			dir = gitDir
		}
	}
	if b, err := readRefFile(filepath.Join(dir, filepath.FromSlash(ref))); err == nil {
		return strings.TrimSpace(string(b))
	}
	f, err := safepath.OpenRegular(filepath.Join(commonDir, "packed-refs"))
	if err != nil {
		return ""
	}
	defer f.Close()
	// A planted packed-refs may be huge; refs of a real one come long before this.
	sc := bufio.NewScanner(io.LimitReader(f, maxPackedRefsScan))
	for sc.Scan() {
		id, name, ok := strings.Cut(strings.TrimSpace(sc.Text()), " ")
		if ok && name == ref {
			return id
		}
	}
	return ""
}

// maxPackedRefsScan bounds how much of packed-refs is searched for HEAD's ref.
const maxPackedRefsScan = 64 << 20

// budget is what a snapshot may still archive.
type budget struct {
	maxBytes, bytes     int64
	maxEntries, entries int
}

func newBudget(opts SnapshotOptions) *budget {
	b := &budget{maxBytes: opts.MaxBytes, maxEntries: opts.MaxEntries}
	if b.maxBytes <= 0 {
		b.maxBytes = DefaultMaxBytes
	}
	if b.maxEntries <= 0 {
		b.maxEntries = DefaultMaxEntries
	}
	return b
}

// take counts one entry of size bytes at src, failing once a bound is passed.
func (b *budget) take(src string, size int64) error {
	b.entries++
	b.bytes += size
	switch {
	case b.entries > b.maxEntries:
		return fmt.Errorf("%w: more than %d entries (at %s)", ErrSnapshotTooLarge, b.maxEntries, src)
	case b.bytes > b.maxBytes:
		return fmt.Errorf("%w: more than %s of files (at %s, %s); raise --git-save-max-size if this repository is that large", ErrSnapshotTooLarge, formatBytes(b.maxBytes), src, formatBytes(size))
	}
	return nil
}

// addBytes counts size bytes of new content at src, failing once the bound is
// passed; the entry was counted by take already.
func (b *budget) addBytes(src string, size int64) error {
	b.bytes += size
	if b.bytes > b.maxBytes {
		return fmt.Errorf("%w: more than %s of new files (at %s, %s); raise --git-save-max-size if this repository is that large", ErrSnapshotTooLarge, formatBytes(b.maxBytes), src, formatBytes(size))
	}
	return nil
}

// formatBytes writes n in the largest binary unit that keeps it at least 1.
func formatBytes(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	v, i := float64(n), 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}

// readRefFile reads the first 4 KiB of a regular file: a ref is one line.
func readRefFile(path string) ([]byte, error) {
	f, err := safepath.OpenRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, 4<<10))
}
