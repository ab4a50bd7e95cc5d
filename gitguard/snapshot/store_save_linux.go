package snapshot

// SaveStored and the publishing of its record.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/agentbox/agentbox/internal/hostpath"
	"golang.org/x/sys/unix"
)

// SaveStored saves the Git metadata of opts.Repo into the store at opts.Dir (which
// must be absolute) and applies retention (opts.Keep snapshots, opts.KeepBytes of
// distinct content). It returns nil and no error when opts.Repo is not a Git work
// tree. A failed save removes the blobs it wrote and leaves no record.
func SaveStored(opts SnapshotOptions) (s *Snapshot, err error) {
	l, ok, err := locateGit(opts.Repo)
	if err != nil {
		return nil, fmt.Errorf("save Git metadata of %s: %w", opts.Repo, err)
	}
	if !ok {
		return nil, nil
	}
	store := opts.Dir
	if !filepath.IsAbs(store) {
		return nil, fmt.Errorf("snapshot store %q: not an absolute path", store)
	}
	for _, inside := range []string{opts.Repo, l.gitDir, l.commonDir} {
		if hostpath.Within(store, inside) {
			return nil, fmt.Errorf("snapshot directory %s lies inside %s: snapshots there could be changed from the sandbox or would be saved again in each snapshot", store, inside)
		}
	}
	now := opts.Now
	if now.IsZero() {
		now = time.Now()
	}
	now = now.Round(0)
	rs, err := openRepoStore(store, opts.Repo)
	if err != nil {
		return nil, fmt.Errorf("save Git metadata to %s: %w", store, err)
	}
	defer rs.close()
	rs.budget, rs.start = newBudget(opts), time.Now()
	if path, rec, ok := rs.unchangedRecord(l, opts.Version); ok {
		return &Snapshot{Path: path, Manifest: rec.Manifest, Skipped: rec.Skipped, Unchanged: true}, nil
	}
	rs.listing = newListing(rs.start)
	rs.progress = &progress{w: opts.Progress, what: "saving the Git metadata of " + opts.Repo}
	defer rs.progress.done()
	defer func() {
		if err != nil {
			for _, p := range rs.written {
				os.Remove(p)
			}
			rs.dropIfEmpty()
		}
	}()
	rs.loadCache()
	head, commit := resolveHead(l.gitDir, l.commonDir)
	rec := Record{StoreFormat: StoreFormat, Manifest: Manifest{
		Format: ManifestFormat, Repo: opts.Repo, GitCommonDir: l.commonDir, GitDir: l.gitDir,
		DotGitFile: l.dotGit, Head: head, HeadCommit: commit, Time: now, AgentboxVersion: opts.Version,
	}}
	// The copy buffer is made when a file is read: a save of unchanged metadata
	// reads none, and a megabyte of fresh heap costs it page faults and clearing.
	w := &walker{rs: rs}
	if rec.Common, rec.CommonMode, rec.CommonMtime, err = w.saveTree(l.commonDir, "c/"); err != nil {
		return nil, fmt.Errorf("save Git metadata to %s: %w", store, err)
	}
	if l.gitDir != l.commonDir {
		if rec.Worktree, rec.WorktreeMode, rec.WorktreeMtime, err = w.saveTree(l.gitDir, "w/"); err != nil {
			return nil, fmt.Errorf("save Git metadata to %s: %w", store, err)
		}
	}
	if l.dotGit != "" {
		if rec.DotGit, rec.DotGitMode, err = w.pointer(l.dotGit); err != nil {
			return nil, fmt.Errorf("save Git metadata to %s: %w", store, err)
		}
	}
	if rs.overEntries > 0 {
		rs.skipped = append(rs.skipped, fmt.Sprintf("%s: this and %d more entries beyond the snapshot's bound of %d entries were not saved (Git's metadata never holds that many: look at what a session left in .git)",
			rs.firstOver, rs.overEntries-1, rs.budget.maxEntries))
	}
	rec.Bytes, rec.NewBytes, rec.Entries, rec.Skipped = rs.total, rs.newBytes, rs.budget.entries, rs.skipped
	if err := rs.sync(); err != nil {
		return nil, fmt.Errorf("save Git metadata to %s: %w", store, err)
	}
	path, err := rs.publishRecord(&rec, now, len(rs.written) > 0)
	if err != nil {
		return nil, fmt.Errorf("save Git metadata to %s: %w", store, err)
	}
	rs.written = nil // the record holds them now
	rs.saveListing(rs.listing, l, opts.Version, path)
	rs.addUsage(rs.newBytes + rs.treeBytes)
	s = &Snapshot{Path: path, Manifest: rec.Manifest, Skipped: rec.Skipped, NewBytes: rec.NewBytes}
	if err := rs.saveCache(); err != nil {
		s.PruneErr = err
	}
	if opts.Keep > 0 || opts.KeepBytes > 0 {
		var perr error
		s.Pruned, perr = rs.prune(path, opts.Keep, opts.KeepBytes)
		s.PruneErr = errors.Join(s.PruneErr, perr)
	}
	return s, nil
}

// manyBlobs is where one syncfs(2) becomes cheaper than an fsync per new blob.
const manyBlobs = 64

// sync makes the new blobs durable before the record that names them is written.
func (rs *repoStore) sync() error {
	if len(rs.written) > manyBlobs {
		if err := unix.Syncfs(int(rs.lock.Fd())); err != nil {
			return fmt.Errorf("sync: %w", err)
		}
		return nil
	}
	for _, p := range rs.written {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		err = f.Sync()
		f.Close()
		if err != nil {
			return fmt.Errorf("sync %s: %w", p, err)
		}
	}
	for _, p := range rs.written {
		syncDir(filepath.Dir(p))
	}
	return nil
}

// publishRecord writes the record as snaps/STAMP.snap, never replacing one. It is
// synced only when the save stored new blobs: a record of unchanged metadata names
// trees an older record names too, and a torn record fails its checks by name
// (restore, prune), so a crash loses at most that record, never silently.
func (rs *repoStore) publishRecord(rec *Record, now time.Time, durable bool) (string, error) {
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return "", err
	}
	b = append(b, '\n')
	snaps := filepath.Join(rs.dir, "snaps")
	tmp, err := os.CreateTemp(snaps, ".tmp-*")
	if err != nil {
		return "", fmt.Errorf("cannot create a file in %s: %w", snaps, unwrapPath(err))
	}
	_, err = tmp.Write(b)
	if err == nil && durable {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp.Name())
		return "", fmt.Errorf("write a record in %s: %w", snaps, err)
	}
	stem := now.UTC().Format("20060102-150405.000000000")
	path, err := publishAs(tmp.Name(), snaps, stem, RecordSuffix)
	if err != nil {
		os.Remove(tmp.Name())
		return "", err
	}
	if durable {
		syncDir(snaps)
	}
	return path, nil
}

func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// publishAs renames tmp to dir/stem+suffix (or stem-N+suffix) without replacing a
// file.
func publishAs(tmp, dir, stem, suffix string) (string, error) {
	for n := 1; n <= 1000; n++ {
		name := stem + suffix
		if n > 1 {
			name = stem + "-" + strconv.Itoa(n) + suffix
		}
		final := filepath.Join(dir, name)
		err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, final, unix.RENAME_NOREPLACE)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
			if err = os.Link(tmp, final); err == nil {
				err = os.Remove(tmp)
			}
		}
		switch {
		case errors.Is(err, fs.ErrExist):
			continue
		case err != nil:
			return "", fmt.Errorf("rename to %s: %w", final, err)
		}
		return final, nil
	}
	return "", fmt.Errorf("1000 snapshots named %s-N%s exist already in %s", stem, suffix, dir)
}
