package snapshot

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"
)

// ManifestFormat is the version of the manifest and archive layout this agentbox
// writes and restores.
const ManifestFormat = 1

// maxManifest bounds what is read of a manifest: a real one is a few hundred bytes,
// and a hostile archive must not make agentbox read gigabytes.
const maxManifest = 64 << 10

// Manifest describes a snapshot: where the metadata came from and what HEAD was.
type Manifest struct {
	Format          int       `json:"format"`                // ManifestFormat
	Repo            string    `json:"repo"`                  // the work tree
	GitCommonDir    string    `json:"git_common_dir"`        // stored under git-common/
	GitDir          string    `json:"git_dir"`               // the work tree's gitdir; under git-worktree/ when it differs from GitCommonDir
	DotGitFile      string    `json:"dotgit_file,omitempty"` // repo/.git when it is a "gitdir:" pointer file, stored as dotgit
	Head            string    `json:"head"`                  // HEAD as written: "ref: refs/heads/main" or a commit id
	HeadCommit      string    `json:"head_commit,omitempty"` // the commit HEAD resolved to; empty for an unborn branch
	Time            time.Time `json:"time"`                  // when the snapshot was taken
	AgentboxVersion string    `json:"agentbox_version"`
}

// Linked reports whether the snapshot holds a separate worktree gitdir.
func (m *Manifest) Linked() bool { return m.GitDir != m.GitCommonDir }

// ReadManifest parses and validates a manifest. It reads at most 64 KiB.
func ReadManifest(r io.Reader) (*Manifest, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxManifest+1))
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	if len(b) > maxManifest {
		return nil, fmt.Errorf("manifest: larger than %d bytes", maxManifest)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	if err := m.validate(); err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	return &m, nil
}

func (m *Manifest) validate() error {
	if m.Format != ManifestFormat {
		return fmt.Errorf("format %d, this agentbox reads format %d", m.Format, ManifestFormat)
	}
	for _, f := range []struct {
		name, val string
		opt       bool
	}{
		{"repo", m.Repo, false},
		{"git_common_dir", m.GitCommonDir, false},
		{"git_dir", m.GitDir, false},
		{"dotgit_file", m.DotGitFile, true},
	} {
		if f.opt && f.val == "" {
			continue
		}
		// A newline is a legal (if unwise) character of a path: refusing it would
		// make a snapshot of such a repository unrestorable.
		if !filepath.IsAbs(f.val) || filepath.Clean(f.val) != f.val || strings.ContainsRune(f.val, 0) {
			return fmt.Errorf("%s %q: not a clean absolute path", f.name, f.val)
		}
	}
	if strings.ContainsAny(m.Head+m.HeadCommit+m.AgentboxVersion, "\x00\n") {
		return errors.New("head, head_commit or agentbox_version holds a control character")
	}
	if m.HeadCommit != "" && !((len(m.HeadCommit) == 40 || len(m.HeadCommit) == 64) && isHex(m.HeadCommit)) {
		return fmt.Errorf("head_commit %q: not a commit id", m.HeadCommit)
	}
	if m.Time.IsZero() {
		return errors.New("time: missing")
	}
	return nil
}
