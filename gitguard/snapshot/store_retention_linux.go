package snapshot

// Retention: which records the store keeps, and the collection of blobs none reaches.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// records lists the records of the repository, oldest first.
func (rs *repoStore) records() ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(rs.dir, "snaps"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if e.Type().IsRegular() && strings.HasSuffix(e.Name(), RecordSuffix) && !strings.HasPrefix(e.Name(), ".") {
			out = append(out, filepath.Join(rs.dir, "snaps", e.Name()))
		}
	}
	sort.Strings(out)
	return out, nil
}

// Retention is lazy about collecting blobs. A record beyond --git-save-keep is moved
// to snaps/dropped/ at once (one rename: it is no longer a snapshot), but the blobs
// that only dropped records use are collected, with a walk of every kept record,
// once collectEvery records are waiting or when the store may be over its byte
// budget. The usage file holds an upper bound of the blobs' bytes (what saves wrote
// since the last collection counted in full), so that a store within its budget is
// not walked to learn so.
var collectEvery = 8

func (rs *repoStore) readUsage() (int64, bool) {
	b, err := readBounded(filepath.Join(rs.dir, usageFile), 32)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n, err == nil && n >= 0
}

func (rs *repoStore) writeUsage(n int64) {
	_ = writeFileNoSync(filepath.Join(rs.dir, usageFile), []byte(strconv.FormatInt(n, 10)+"\n"))
}

// addUsage counts what this save wrote; an unknown usage stays unknown.
func (rs *repoStore) addUsage(n int64) {
	if n == 0 {
		return
	}
	if u, ok := rs.readUsage(); ok {
		rs.writeUsage(u + n)
	}
}

// droppedRecords lists the records waiting for their blobs to be collected.
func (rs *repoStore) droppedRecords() []string {
	ents, err := os.ReadDir(filepath.Join(rs.dir, "snaps", droppedDir))
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if e.Type().IsRegular() && strings.HasSuffix(e.Name(), RecordSuffix) {
			out = append(out, filepath.Join(rs.dir, "snaps", droppedDir, e.Name()))
		}
	}
	return out
}

// prune applies retention after the save of self: the oldest records beyond keep
// go, and then the oldest whose content would take the distinct bytes of the kept
// ones beyond keepBytes; self is always kept. It returns the records removed.
func (rs *repoStore) prune(self string, keep int, keepBytes int64) ([]string, error) {
	recs, err := rs.records()
	if err != nil {
		return nil, fmt.Errorf("prune old snapshots: %w", err)
	}
	usage, known := rs.readUsage()
	if keepBytes > 0 && (!known || usage > keepBytes) {
		return rs.collect(self, recs, keep, keepBytes)
	}
	var pruned []string
	if keep > 0 && len(recs) > keep {
		dd := filepath.Join(rs.dir, "snaps", droppedDir)
		if err := os.Mkdir(dd, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("prune old snapshots: %w", err)
		}
		for _, p := range recs[:len(recs)-keep] {
			if p == self {
				continue
			}
			if err := os.Rename(p, filepath.Join(dd, filepath.Base(p))); err != nil {
				return pruned, fmt.Errorf("prune old snapshots: %w", err)
			}
			pruned = append(pruned, p)
		}
	}
	if len(rs.droppedRecords()) < collectEvery {
		return pruned, nil
	}
	recs, err = rs.records()
	if err != nil {
		return pruned, fmt.Errorf("prune old snapshots: %w", err)
	}
	more, err := rs.collect(self, recs, keep, keepBytes)
	return append(pruned, more...), err
}

// collect walks every record, keeps the newest ones within keep and keepBytes,
// removes the others and the dropped ones, and the blobs only those used; it
// records the kept ones' distinct bytes as the usage.
func (rs *repoStore) collect(self string, recs []string, keep int, keepBytes int64) ([]string, error) {
	r := newReach(rs)
	var kept, dropped []string
	var errs []error
	unsure := false
	var bytes int64
	// Newest first: self, then the others.
	order := []string{self}
	for i := len(recs) - 1; i >= 0; i-- {
		if recs[i] != self {
			order = append(order, recs[i])
		}
	}
	for i, p := range order {
		if i > 0 && keep > 0 && len(kept) >= keep {
			dropped = append(dropped, p)
			continue
		}
		added, err := r.addRecord(p, true)
		if err != nil {
			// A record that cannot be read is kept, and no blob is collected
			// this time: what it names is not known.
			errs = append(errs, err)
			unsure = true
		}
		if i > 0 && keepBytes > 0 && bytes+added > keepBytes {
			r.unmark() // its blobs are not kept by it
			dropped = append(dropped, p)
			keep = len(kept) // and every older one goes too
			continue
		}
		bytes += added
		r.commit()
		kept = append(kept, p)
	}
	waiting := rs.droppedRecords()
	var pruned []string
	for _, p := range append(dropped, waiting...) {
		// Collect before removing: a record that is gone cannot be read.
		if _, err := r.addRecord(p, false); err != nil {
			errs = append(errs, err)
		}
		if err := os.Remove(p); err != nil {
			errs = append(errs, err)
			continue
		}
		if filepath.Base(filepath.Dir(p)) != droppedDir {
			pruned = append(pruned, p)
		}
	}
	if unsure {
		return pruned, fmt.Errorf("prune old snapshots: %w", errors.Join(errs...))
	}
	for _, h := range r.garbage() {
		if err := os.Remove(rs.blobPath(h)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return pruned, fmt.Errorf("prune old snapshots: %w", errors.Join(errs...))
	}
	rs.writeUsage(bytes)
	return pruned, nil
}

// reach computes which blobs kept records use, and which only dropped ones do.
type reach struct {
	rs      *repoStore
	kept    map[string]bool // blobs of kept records
	pending map[string]bool // blobs first seen in the record being added
	other   map[string]bool // blobs of dropped records
}

func newReach(rs *repoStore) *reach {
	return &reach{rs: rs, kept: map[string]bool{}, pending: map[string]bool{}, other: map[string]bool{}}
}

// addRecord marks the blobs of the record at p, as kept (returning the bytes of the
// blobs no kept record had) or as dropped.
func (r *reach) addRecord(p string, keep bool) (int64, error) {
	rec, err := readRecord(p)
	if err != nil {
		return 0, err
	}
	var added int64
	mark := func(h string, size int64) bool {
		if keep {
			if r.kept[h] || r.pending[h] {
				return false
			}
			r.pending[h] = true
			added += size
			return true
		}
		if r.other[h] || r.kept[h] {
			return false
		}
		r.other[h] = true
		return true
	}
	var walk func(tree string) error
	walk = func(tree string) error {
		b, err := r.rs.readBlob(tree, maxTree)
		if err != nil {
			return err
		}
		if !mark(tree, int64(len(b))) {
			return nil // seen: its subtrees too
		}
		ents, err := parseTree(b)
		if err != nil {
			return fmt.Errorf("tree %s: %w", tree, err)
		}
		for _, e := range ents {
			switch e.kind {
			case 'f':
				mark(e.ref, e.size)
			case 'd':
				if err := walk(e.ref); err != nil {
					return err
				}
			}
		}
		return nil
	}
	for _, t := range []string{rec.Common, rec.Worktree} {
		if t != "" {
			if err := walk(t); err != nil {
				return added, fmt.Errorf("%s: %w", p, err)
			}
		}
	}
	if rec.DotGit != "" {
		mark(rec.DotGit, 0)
	}
	return added, nil
}

func (r *reach) commit() {
	for h := range r.pending {
		r.kept[h] = true
	}
	clear(r.pending)
}

func (r *reach) unmark() { clear(r.pending) }

// garbage is the blobs of dropped records that no kept record uses.
func (r *reach) garbage() []string {
	var out []string
	for h := range r.other {
		if !r.kept[h] {
			out = append(out, h)
		}
	}
	sort.Strings(out)
	return out
}

const (
	droppedDir = "dropped"
	usageFile  = "usage"
)
