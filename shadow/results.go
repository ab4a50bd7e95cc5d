package shadow

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// resultsDir is the results store's directory name below STATE/shadow. Shadow
// repositories of sessions always carry a hash suffix, so no repository's can clash.
const resultsDir = "results.git"

// Result describes one stored result (benchmark, kernel matrix …).
type Result struct {
	ID      string    `json:"id"`
	Kind    string    `json:"kind"`
	Time    time.Time `json:"time"`
	Size    int       `json:"size"`              // bytes of JSON
	Summary string    `json:"summary,omitempty"` // the result's top-level "summary" string
	Commit  string    `json:"-"`
}

// StoreResult stores data, a JSON document produced by kind (e.g. "bench",
// "kmatrix"), in the results store below stateDir and returns its id. The document is
// kept byte for byte; a top-level "summary" string in it is shown by agentbox log
// --results.
func StoreResult(stateDir, kind string, data []byte) (string, error) {
	if !validKind(kind) {
		return "", fmt.Errorf("shadow: result kind %q: want 1-32 of a-z, 0-9, '-', '_'", kind)
	}
	if !json.Valid(data) {
		return "", fmt.Errorf("shadow: %s result is not valid JSON", kind)
	}
	s, err := open(stateDir, filepath.Join(stateDir, "shadow", resultsDir), "")
	if err != nil {
		return "", err
	}
	now := time.Now()
	meta := Result{ID: newID(now), Kind: kind, Time: now, Size: len(data), Summary: summaryOf(data)}

	unlock, err := s.lock()
	if err != nil {
		return "", err
	}
	defer unlock()
	blob, err := s.git.run(bytes.NewReader(data), "hash-object", "-w", "--stdin")
	if err != nil {
		return "", fmt.Errorf("shadow: store %s result: %w", kind, err)
	}
	entry := fmt.Sprintf("100644 blob %s\tresult.json\n", strings.TrimSpace(string(blob)))
	tree, err := s.git.run(strings.NewReader(entry), "mktree")
	if err != nil {
		return "", fmt.Errorf("shadow: store %s result: %w", kind, err)
	}
	body, err := json.MarshalIndent(meta, "", "  ")
	if err != nil {
		return "", fmt.Errorf("shadow: store %s result: %w", kind, err)
	}
	msg := fmt.Sprintf("agentbox result %s %s\n\n%s\n", kind, meta.ID, body)
	commit, err := s.git.run(strings.NewReader(msg), "commit-tree", strings.TrimSpace(string(tree)))
	if err != nil {
		return "", fmt.Errorf("shadow: store %s result: %w", kind, err)
	}
	if err := s.updateRef(resultRefs+meta.ID, strings.TrimSpace(string(commit)), ""); err != nil {
		return "", fmt.Errorf("shadow: store %s result: %w", kind, err)
	}
	return meta.ID, nil
}

func validKind(k string) bool {
	if k == "" || len(k) > 32 {
		return false
	}
	for _, r := range k {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-' && r != '_' {
			return false
		}
	}
	return true
}

// summaryOf is data's top-level "summary" string, on one line, at most 200 runes.
func summaryOf(data []byte) string {
	var v struct {
		Summary string `json:"summary"`
	}
	if json.Unmarshal(data, &v) != nil {
		return ""
	}
	return oneLine(v.Summary, 200)
}

// openResults opens the results store, or returns nil when none was ever written.
func openResults(stateDir string) (*Store, error) {
	dir := filepath.Join(stateDir, "shadow", resultsDir)
	if _, err := os.Stat(filepath.Join(dir, "HEAD")); err != nil {
		return nil, nil
	}
	return open(stateDir, dir, "")
}

// Results lists the stored results below stateDir, newest first.
func Results(stateDir string) ([]Result, error) {
	return results(stateDir, resultRefs)
}

func results(stateDir, pattern string) ([]Result, error) {
	s, err := openResults(stateDir)
	if s == nil || err != nil {
		return nil, err
	}
	out, err := s.git.run(nil, "for-each-ref", "--format=%(objectname)%0a%(contents:body)%00", pattern)
	if err != nil {
		return nil, fmt.Errorf("shadow: list results: %w", err)
	}
	var res []Result
	for _, entry := range strings.Split(string(out), "\x00") {
		commit, body, ok := strings.Cut(strings.TrimLeft(entry, "\n"), "\n")
		if !ok {
			continue
		}
		var r Result
		if err := json.Unmarshal([]byte(body), &r); err != nil {
			continue // not written by StoreResult
		}
		r.Commit = commit
		res = append(res, r)
	}
	sort.SliceStable(res, func(i, j int) bool {
		if !res[i].Time.Equal(res[j].Time) {
			return res[i].Time.After(res[j].Time)
		}
		return res[i].ID > res[j].ID
	})
	return res, nil
}

// FindResult returns the result whose id is id or starts with id.
func FindResult(stateDir, id string) (Result, error) {
	if !validID(id) {
		return Result{}, fmt.Errorf("%q is not a result id", id)
	}
	res, err := results(stateDir, resultRefs+id+"*")
	if err != nil {
		return Result{}, err
	}
	for _, r := range res {
		if r.ID == id {
			return r, nil
		}
	}
	switch len(res) {
	case 0:
		return Result{}, fmt.Errorf("result %s: %w", id, ErrNotFound)
	case 1:
		return res[0], nil
	}
	return Result{}, fmt.Errorf("result id %s is ambiguous (%d results)", id, len(res))
}

// WriteResult writes the JSON document of result r, as stored, to w.
func WriteResult(w io.Writer, stateDir string, r Result) error {
	s, err := openResults(stateDir)
	if err != nil {
		return err
	}
	if s == nil {
		return fmt.Errorf("result %s: %w", r.ID, ErrNotFound)
	}
	return s.git.stream(w, "cat-file", "blob", r.Commit+":result.json")
}
