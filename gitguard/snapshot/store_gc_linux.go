package snapshot

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// StorePruned is one thing PruneStore removed (or, dry, would remove).
type StorePruned struct {
	Path    string
	Repo    string
	What    string // "repository gone", "N unreferenced blobs"
	Removed bool
	Err     error
}

// PruneStore is agentbox gc for the snapshot store at store: in each repository's
// part every blob no record names (left by a save that was killed) goes, each
// under the repository's lock, and the part of a repository that no longer exists
// goes unless keepGone says to keep it (given the newest record's time). A path
// that is gone need not be a repository deleted: a session that can write its
// parent can move it away, and its snapshots are then the only copy of what that
// session may have done to its .git. A part with a record it cannot read keeps all
// its blobs.
func PruneStore(store string, keepGone func(repo string, newest time.Time) bool, dryRun bool) ([]StorePruned, error) {
	ents, err := os.ReadDir(store)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot store %s: %w", store, err)
	}
	var out []StorePruned
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(store, e.Name())
		b, err := readBounded(filepath.Join(dir, "repo"), 64<<10)
		if err != nil {
			continue // not a repository's part of the store
		}
		repo := strings.TrimSuffix(string(b), "\n")
		if p, ok := pruneRepoStore(dir, repo, keepGone, dryRun); ok {
			out = append(out, p)
		}
	}
	return out, nil
}

func pruneRepoStore(dir, repo string, keepGone func(string, time.Time) bool, dryRun bool) (StorePruned, bool) {
	p := StorePruned{Path: dir, Repo: repo}
	lf, err := lockStore(dir, unix.LOCK_EX)
	if err != nil {
		p.Err = err
		return p, true
	}
	rs := &repoStore{dir: dir, lock: lf}
	defer rs.close()
	recs, recErr := rs.records()
	if _, err := os.Lstat(repo); errors.Is(err, fs.ErrNotExist) && !keepGone(repo, newestRecord(recs)) {
		p.What = "repository gone"
		if !dryRun {
			if p.Err = os.RemoveAll(dir); p.Err == nil {
				p.Removed = true
			}
		}
		return p, true
	}
	if recErr != nil {
		p.Err = recErr
		return p, true
	}
	r := newReach(rs)
	for _, rec := range recs {
		if _, err := r.addRecord(rec, true); err != nil {
			p.Err = fmt.Errorf("%w (no blob removed)", err)
			return p, true
		}
		r.commit()
	}
	var garbage []string
	_ = filepath.WalkDir(filepath.Join(dir, "blobs"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		name := filepath.Base(filepath.Dir(path)) + d.Name()
		if strings.HasPrefix(d.Name(), ".tmp-") || !r.kept[name] {
			garbage = append(garbage, path)
		}
		return nil
	})
	garbage = append(garbage, rs.droppedRecords()...)
	if len(garbage) == 0 {
		return p, false
	}
	p.What = fmt.Sprintf("%d unreferenced blobs and dropped records", len(garbage))
	if dryRun {
		return p, true
	}
	var errs []error
	for _, g := range garbage {
		if err := os.Remove(g); err != nil {
			errs = append(errs, err)
		}
	}
	p.Err = errors.Join(errs...)
	p.Removed = p.Err == nil
	return p, true
}

// newestRecord is the time the newest of recs was written (the zero time: none).
func newestRecord(recs []string) time.Time {
	var newest time.Time
	for _, r := range recs {
		if fi, err := os.Lstat(r); err == nil && fi.ModTime().After(newest) {
			newest = fi.ModTime()
		}
	}
	return newest
}
