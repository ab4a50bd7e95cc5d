// Package snapshot saves the repository's Git metadata before a session (DESIGN.md
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
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/gitguard"
	"github.com/agentbox/agentbox/internal/safepath"
	"github.com/agentbox/agentbox/policy"
)

// The layout of a snapshot ZIP (DESIGN.md P8). manifest.json comes first and is
// stored uncompressed with its sizes in the local header, so that retention can read
// it without parsing the central directory of a large archive.
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
	Dir     string    // where the ZIP goes, absolute; "" is Repo's parent directory
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
	Path     string   // the ZIP, mode 0600
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

// SaveSnapshot writes a ZIP of the Git metadata of opts.Repo to
// DIR/NAME.git-save-YYYYMMDD-HHMMSS.zip (a "-N" suffix when that name is taken) and
// then prunes the oldest snapshots of the same repository beyond opts.Keep. It returns
// nil and no error when opts.Repo is not a Git work tree.
//
// The ZIP is written to a hidden temporary file in DIR, synced, and renamed to its
// final name only when complete, so a failure (disk full, unreadable file) never leaves a
// partial snapshot under a snapshot's name. An existing snapshot is never replaced.
func SaveSnapshot(opts SnapshotOptions) (*Snapshot, error) {
	l, ok, err := locateGit(opts.Repo)
	if err != nil {
		return nil, fmt.Errorf("save Git metadata of %s: %w", opts.Repo, err)
	}
	if !ok {
		return nil, nil
	}
	dir := opts.Dir
	if dir == "" {
		dir = filepath.Dir(opts.Repo)
	}
	for _, inside := range []string{opts.Repo, l.gitDir, l.commonDir} {
		if policy.Within(dir, inside) {
			return nil, fmt.Errorf("snapshot directory %s lies inside %s: snapshots there could be changed from the sandbox or would be saved again in each snapshot", dir, inside)
		}
	}
	now := opts.Now
	if now.IsZero() {
		now = time.Now()
	}
	now = now.Round(0) // no monotonic reading: the manifest holds wall time
	head, commit := resolveHead(l.gitDir, l.commonDir)
	m := Manifest{
		Format:          ManifestFormat,
		Repo:            opts.Repo,
		GitCommonDir:    l.commonDir,
		GitDir:          l.gitDir,
		DotGitFile:      l.dotGit,
		Head:            head,
		HeadCommit:      commit,
		Time:            now,
		AgentboxVersion: opts.Version,
	}
	base := filepath.Base(opts.Repo)
	stamp := now.Format("20060102-150405")
	b := newBudget(opts)
	path, err := writeSnapshot(dir, base+".git-save-"+stamp, &m, l, b)
	if err != nil {
		return nil, err
	}
	s := &Snapshot{Path: path, Manifest: m, Skipped: b.skipped}
	if opts.Keep > 0 {
		s.Pruned, s.PruneErr = pruneSnapshots(dir, base, opts.Repo, path, opts.Keep)
	}
	return s, nil
}

// writeSnapshot writes the archive to a temporary file in dir and publishes it as
// stem.zip (or stem-N.zip), returning the final path.
func writeSnapshot(dir, stem string, m *Manifest, l layout, b *budget) (path string, err error) {
	target := filepath.Join(dir, stem+".zip")
	tmp, err := os.CreateTemp(dir, "."+stem+".zip.tmp-*")
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the temporary name would only confuse
		}
		return "", fmt.Errorf("save Git metadata to %s: cannot create a file in %s: %w", target, dir, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	// CreateTemp makes the file 0600 already; say it again so that no umask or
	// platform difference can widen a file holding remote URLs and hooks.
	if err := tmp.Chmod(0o600); err != nil {
		return "", fmt.Errorf("save Git metadata to %s: %w", target, err)
	}
	if err := writeArchive(tmp, m, l, b); err != nil {
		return "", fmt.Errorf("save Git metadata to %s: %w", target, err)
	}
	if err := tmp.Sync(); err != nil {
		return "", fmt.Errorf("save Git metadata to %s: sync: %w", target, err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("save Git metadata to %s: %w", target, err)
	}
	path, err = publish(tmp.Name(), dir, stem)
	if err != nil {
		return "", fmt.Errorf("save Git metadata to %s: %w", target, err)
	}
	syncDir(dir)
	return path, nil
}

// syncDir makes the new directory entry durable. A failure is not reported: the data
// is synced, and some filesystems refuse fsync on directories.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

// storeAsIs reports whether a file of a gitdir is already compressed, or is mostly
// hashes, so that deflating it again would cost time and save nothing: packs and their
// indexes, loose objects (zlib streams named by their hash), commit graphs and
// multi-pack indexes.
func storeAsIs(rel string) bool {
	base := filepath.Base(rel)
	switch filepath.Ext(base) {
	case ".pack", ".idx", ".rev", ".bitmap", ".midx", ".mtimes", ".keep", ".promisor":
		return true
	}
	switch base {
	case "commit-graph", "multi-pack-index":
		return true
	}
	if strings.HasSuffix(filepath.Dir(rel), "commit-graphs") && strings.HasSuffix(base, ".graph") {
		return true
	}
	parent := filepath.Base(filepath.Dir(rel))
	return len(parent) == 2 && isHex(parent) && (len(base) == 38 || len(base) == 62) && isHex(base)
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
	skipped             []string // what was not archived, and why (archiver.skip)
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

// snapshotName matches the snapshots of the repository named base; the groups are
// the date, the time and the collision suffix.
func snapshotName(base string) *regexp.Regexp {
	return regexp.MustCompile(`^` + regexp.QuoteMeta(base) + `\.git-save-(\d{8})-(\d{6})(?:-(\d+))?\.zip$`)
}

// pruneSnapshots removes the oldest snapshots of repo in dir so that keep remain,
// counting the one just written (self), which is never removed even when the clock
// went backwards. Only regular files with this repository's name pattern whose
// manifest names this same repository are candidates: another repository of the same
// name sharing --git-save-dir, or an unrelated file, is never touched.
func pruneSnapshots(dir, base, repo, self string, keep int) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("prune old snapshots in %s: %w", dir, err)
	}
	re := snapshotName(base)
	type cand struct {
		path string
		key  string // date, time, zero-padded suffix: sorts oldest first
	}
	var cands []cand
	for _, e := range ents {
		sm := re.FindStringSubmatch(e.Name())
		p := filepath.Join(dir, e.Name())
		if sm == nil || !e.Type().IsRegular() || p == self {
			continue
		}
		if m, err := readManifestFile(p); err != nil || m.Repo != repo {
			continue
		}
		n, _ := strconv.Atoi(sm[3])
		cands = append(cands, cand{p, fmt.Sprintf("%s%s%06d", sm[1], sm[2], n)})
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].key < cands[j].key })
	var pruned []string
	var errs []error
	for i := 0; i < len(cands)-(keep-1); i++ {
		if err := os.Remove(cands[i].path); err != nil {
			errs = append(errs, err)
			continue
		}
		pruned = append(pruned, cands[i].path)
	}
	if len(errs) > 0 {
		return pruned, fmt.Errorf("prune old snapshots: %w", errors.Join(errs...))
	}
	return pruned, nil
}
