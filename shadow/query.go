package shadow

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// ErrNotFound is returned when no session or result has the id asked for.
var ErrNotFound = errors.New("no session or result with that id")

// OpenExisting opens the shadow repository of repo without creating it; it returns
// an error wrapping fs.ErrNotExist when no session was ever recorded there.
func OpenExisting(stateDir, repo string) (*Store, error) {
	dir := Dir(stateDir, repo)
	if _, err := os.Stat(filepath.Join(dir, "HEAD")); err != nil {
		return nil, fmt.Errorf("no sessions recorded for %s: %w", repo, fs.ErrNotExist)
	}
	return open(stateDir, dir, repo)
}

// All opens every shadow repository of recorded sessions below stateDir.
func All(stateDir string) ([]*Store, error) {
	dirs, err := filepath.Glob(filepath.Join(stateDir, "shadow", "*.git"))
	if err != nil {
		return nil, err
	}
	var stores []*Store
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, repoFile))
		if err != nil {
			continue // the results store, or not ours
		}
		repo := strings.TrimSpace(string(b))
		s, err := open(stateDir, dir, repo)
		if err != nil {
			return nil, err
		}
		stores = append(stores, s)
	}
	return stores, nil
}

// Sessions returns the sessions recorded in s, newest first. Records that cannot be
// parsed are returned with only ID set and a note saying why.
func (s *Store) Sessions() ([]Record, error) {
	return s.sessions(sessionRefs)
}

func (s *Store) sessions(pattern string) ([]Record, error) {
	// One record per ref: "REF TAB COMMIT TAB PARENT LF BODY NUL". The JSON body never
	// holds a raw NUL (encoding/json escapes control characters).
	out, err := s.git.run(nil, "for-each-ref",
		"--format=%(refname)%09%(objectname)%09%(parent)%0a%(contents:body)%00", pattern)
	if err != nil {
		return nil, fmt.Errorf("shadow: list sessions in %s: %w", s.Dir, err)
	}
	var recs []Record
	for _, entry := range strings.Split(string(out), "\x00") {
		entry = strings.TrimLeft(entry, "\n")
		head, body, ok := strings.Cut(entry, "\n")
		if !ok {
			continue
		}
		f := strings.Split(head, "\t")
		if len(f) != 3 {
			continue
		}
		var rec Record
		if err := json.Unmarshal([]byte(body), &rec); err != nil {
			rec = Record{Notes: []string{"unreadable record: " + err.Error()}}
		}
		rec.ID = strings.TrimPrefix(f[0], sessionRefs)
		rec.Repo = s.Repo
		rec.StartCommit, rec.EndCommit = "", ""
		if rec.Complete {
			rec.EndCommit, rec.StartCommit = f[1], f[2]
		} else {
			rec.StartCommit = f[1]
		}
		recs = append(recs, rec)
	}
	sort.SliceStable(recs, func(i, j int) bool {
		if !recs[i].Start.Equal(recs[j].Start) {
			return recs[i].Start.After(recs[j].Start)
		}
		return recs[i].ID > recs[j].ID
	})
	return recs, nil
}

// Find returns the session whose id is id or starts with id, searching every shadow
// repository below stateDir. An id matching more than one session is an error that
// lists them.
func Find(stateDir, id string) (*Store, Record, error) {
	if !validID(id) {
		return nil, Record{}, fmt.Errorf("%q is not a session id (want e.g. 20260101-120000-abcdef)", id)
	}
	stores, err := All(stateDir)
	if err != nil {
		return nil, Record{}, err
	}
	var (
		found   []Record
		foundIn *Store
	)
	for _, s := range stores {
		recs, err := s.sessions(sessionRefs + id + "*")
		if err != nil {
			return nil, Record{}, err
		}
		for _, r := range recs {
			if r.ID == id {
				return s, r, nil
			}
		}
		if len(recs) > 0 {
			found, foundIn = append(found, recs...), s
		}
	}
	switch len(found) {
	case 0:
		return nil, Record{}, fmt.Errorf("session %s: %w", id, ErrNotFound)
	case 1:
		return foundIn, found[0], nil
	}
	ids := make([]string, len(found))
	for i, r := range found {
		ids[i] = r.ID
	}
	return nil, Record{}, fmt.Errorf("session id %s is ambiguous: %s", id, strings.Join(ids, ", "))
}

// Diff writes what session rec changed as a unified diff (binary files named, not
// dumped), or as a diffstat. Git renders it from the two recorded trees; no work tree
// is involved, and no textconv, external diff or pager runs.
func (s *Store) Diff(w io.Writer, rec Record, stat bool) error {
	if rec.EndCommit == "" {
		return fmt.Errorf("session %s has no end state (it never finished)", rec.ID)
	}
	from := rec.StartCommit
	if from == "" {
		from = emptyTree
	}
	args := []string{"diff", "--no-textconv", "--no-ext-diff", "--no-color", "--no-renames"}
	if stat {
		args = append(args, "--stat=200")
	}
	args = append(args, from, rec.EndCommit, "--")
	if err := s.git.stream(w, args...); err != nil {
		return fmt.Errorf("shadow: diff of session %s: %w", rec.ID, err)
	}
	return nil
}

// Compact packs the loose objects and refs of every shadow repository below stateDir
// (git gc, under each repository's lock), for agentbox gc. Recording packs
// incrementally on its own (maintain); this is the full repack.
func Compact(stateDir string) error {
	stores, err := All(stateDir)
	if err != nil {
		return err
	}
	res, err := openResults(stateDir)
	if err != nil {
		return err
	}
	if res != nil {
		stores = append(stores, res)
	}
	for _, s := range stores {
		if err := s.compact(); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) compact() error {
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	// Every object is reachable from a session's or a result's ref except those of a
	// start state whose commit was never written; two weeks' grace keeps Git's default.
	// (The stage state's tree may be such an object: the next record sweeps.)
	s.dropStage()
	if _, err := s.git.run(nil, "gc", "--quiet"); err != nil {
		return fmt.Errorf("shadow: compact %s: %w", s.Dir, err)
	}
	return nil
}
