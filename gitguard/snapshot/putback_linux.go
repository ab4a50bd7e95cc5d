package snapshot

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/gitguard"
	"github.com/agentbox/agentbox/gitguard/gitconfig"
	"github.com/agentbox/agentbox/internal/safepath"
	"github.com/agentbox/agentbox/internal/termsafe"
)

// agentbox undo --git puts a repository's Git metadata back as a stored snapshot
// holds it: HEAD, the index, packed-refs and the loose refs. Objects are never
// touched (a ref put back names a commit the object store still has, unless the
// session pruned it), nor config, hooks or anything else the audit watches.

// Bounds on what is read back from a snapshot and from the live Git dir.
const (
	maxRefFile   = 4096      // a loose ref or HEAD: an id or "ref: NAME"
	maxMetaFile  = 512 << 20 // the index or packed-refs
	maxLooseRefs = 200_000
	maxRefDepth  = 32
)

// GitState is what undo --git puts back, by path below the Git dir.
type GitState struct {
	Manifest Manifest
	Files    map[string][]byte // "HEAD", "index", "packed-refs", "refs/heads/main", …
}

// ReadGitState reads HEAD, the index, packed-refs and the loose refs of the stored
// snapshot recPath, each checked against its hash. A linked worktree's snapshot is
// refused: its HEAD and index live in a gitdir of their own.
func ReadGitState(recPath string) (*GitState, error) {
	if !IsStoredSnapshot(recPath) {
		return nil, fmt.Errorf("%s is not a stored snapshot", recPath)
	}
	rs, rec, err := openStoredRecord(recPath)
	if err != nil {
		return nil, err
	}
	defer rs.close()
	if rec.Worktree != "" || rec.DotGit != "" {
		return nil, errors.New("the snapshot is of a linked worktree or a .git file; put it back with agentbox restore")
	}
	st := &GitState{Manifest: rec.Manifest, Files: map[string][]byte{}}
	ents, err := readTreeBlob(rs, rec.Common)
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		switch {
		case e.kind == 'f' && (e.name == "HEAD" || e.name == "index" || e.name == "packed-refs"):
			max := int64(maxMetaFile)
			if e.name == "HEAD" {
				max = maxRefFile
			}
			b, err := rs.readBlob(e.ref, max)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", e.name, err)
			}
			st.Files[e.name] = b
		case e.kind == 'd' && e.name == "refs":
			if err := st.readRefs(rs, e.ref, "refs", 0); err != nil {
				return nil, err
			}
		}
	}
	if _, ok := st.Files["HEAD"]; !ok {
		return nil, errors.New("the snapshot holds no HEAD")
	}
	return st, nil
}

func readTreeBlob(rs *repoStore, h string) ([]treeEntry, error) {
	b, err := rs.readBlob(h, maxTree)
	if err != nil {
		return nil, err
	}
	return parseTree(b)
}

// readRefs adds the loose refs of the tree h, at dir.
func (st *GitState) readRefs(rs *repoStore, h, dir string, depth int) error {
	if depth > maxRefDepth {
		return fmt.Errorf("%s: refs nested deeper than %d", dir, maxRefDepth)
	}
	ents, err := readTreeBlob(rs, h)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !refComponent(e.name) {
			return fmt.Errorf("%s: the snapshot holds a ref name undo refuses: %q", dir, e.name)
		}
		p := dir + "/" + e.name
		switch e.kind {
		case 'd':
			if err := st.readRefs(rs, e.ref, p, depth+1); err != nil {
				return err
			}
		case 'f':
			if len(st.Files) > maxLooseRefs {
				return fmt.Errorf("more than %d loose refs", maxLooseRefs)
			}
			b, err := rs.readBlob(e.ref, maxRefFile)
			if err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			st.Files[p] = b
		}
	}
	return nil
}

// refComponent reports whether name may be a component of a ref's path.
func refComponent(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsAny(name, "/\x00") && len(name) <= 255
}

// PutBack makes the Git dir of repo (its .git directory) hold st's HEAD, index,
// packed-refs and loose refs: files that differ are replaced (a new file renamed over
// them), an index or packed-refs the snapshot had not is removed, and so is each
// loose ref the snapshot does not hold. Nothing is opened through a symlink. With
// dryRun it only says what it would change. It returns what changed (or would).
func PutBack(repo string, st *GitState, dryRun bool) ([]string, error) {
	if st.Manifest.GitCommonDir != filepath.Join(repo, ".git") || st.Manifest.GitDir != st.Manifest.GitCommonDir {
		return nil, fmt.Errorf("the snapshot is of the Git dir %s, not %s/.git", st.Manifest.GitCommonDir, repo)
	}
	// No symlink anywhere on the path: the snapshot names the repository as
	// resolved at launch, so one there now was planted since (a session of a
	// repository around this one can) and would lead to another Git dir.
	root, err := safepath.Open(repo, unix.O_PATH|unix.O_DIRECTORY)
	if errors.Is(err, safepath.ErrSymlink) {
		return nil, fmt.Errorf("%s: its path goes through a symlink now, not as when the snapshot was taken; undo --git writes nowhere else", repo)
	}
	if err != nil {
		return nil, err
	}
	defer unix.Close(root)
	gfd, err := safepath.OpenBeneath(root, ".git", unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return nil, fmt.Errorf("%s/.git: %w (undo --git puts back a .git directory only)", repo, err)
	}
	defer unix.Close(gfd)
	var sb unix.Stat_t
	if unix.Fstatat(gfd, "reftable", &sb, unix.AT_SYMLINK_NOFOLLOW) == nil {
		return nil, errors.New("the repository keeps its refs in a reftable, which undo --git does not write")
	}
	if idx, ok := st.Files["index"]; ok {
		if err := checkIndex(gfd, idx); err != nil {
			return nil, err
		}
	}
	p := &putter{gfd: gfd, dry: dryRun}
	names := make([]string, 0, len(st.Files))
	for n := range st.Files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p.write(n, st.Files[n])
	}
	for _, n := range []string{"index", "packed-refs"} {
		if _, ok := st.Files[n]; !ok {
			p.remove(n)
		}
	}
	p.removeExtra(st, "refs", 0)
	return p.changed, errors.Join(p.errs...)
}

type putter struct {
	gfd     int
	dry     bool
	changed []string
	errs    []error
	seen    int
}

// write makes the file rel below the Git dir hold b.
func (p *putter) write(rel string, b []byte) {
	dir, name := filepath.Split(rel)
	dfd, err := safepath.OpenBeneath(p.gfd, dir, unix.O_PATH|unix.O_DIRECTORY)
	if err == nil {
		defer unix.Close(dfd)
		if cur, ok := readSmall(dfd, name, int64(len(b))+1); ok && bytes.Equal(cur, b) {
			return
		}
	}
	p.changed = append(p.changed, rel)
	if p.dry {
		return
	}
	if err != nil {
		if dfd, err = safepath.MkdirAll(p.gfd, dir, 0o755); err != nil {
			p.errs = append(p.errs, fmt.Errorf("%s: %w", rel, err))
			return
		}
		defer unix.Close(dfd)
	}
	// A name the session could not guess: one it planted (a directory, say) would
	// otherwise keep this file from being put back.
	var rnd [8]byte
	_, _ = unix.Getrandom(rnd[:], 0)
	tmp := "." + name + ".agentbox-undo-" + hex.EncodeToString(rnd[:])
	if err := safepath.ReplaceAt(dfd, tmp, name, b, 0o644, false); err != nil {
		p.errs = append(p.errs, fmt.Errorf("%s: %w", rel, err))
	}
}

// remove removes the regular file rel at the top of the Git dir.
func (p *putter) remove(rel string) {
	var st unix.Stat_t
	if unix.Fstatat(p.gfd, rel, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return
	}
	p.changed = append(p.changed, rel+" (removed)")
	if !p.dry {
		if err := unix.Unlinkat(p.gfd, rel, 0); err != nil {
			p.errs = append(p.errs, fmt.Errorf("%s: %w", rel, err))
		}
	}
}

// removeExtra removes the loose refs below dir that st does not hold (made since
// the snapshot), walking the live refs without following a symlink.
func (p *putter) removeExtra(st *GitState, dir string, depth int) {
	if depth > maxRefDepth {
		return
	}
	dfd, err := safepath.OpenBeneath(p.gfd, dir, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return
	}
	f := os.NewFile(uintptr(dfd), dir)
	defer f.Close()
	ents, err := f.ReadDir(maxLooseRefs)
	if err != nil && err != io.EOF {
		p.errs = append(p.errs, fmt.Errorf("%s: %w", dir, err))
	}
	for _, e := range ents {
		if p.seen++; p.seen > maxLooseRefs {
			p.errs = append(p.errs, fmt.Errorf("more than %d loose refs; the rest left as they are", maxLooseRefs))
			return
		}
		rel := dir + "/" + e.Name()
		switch {
		case e.IsDir():
			p.removeExtra(st, rel, depth+1)
		case e.Type().IsRegular():
			if _, ok := st.Files[rel]; ok || strings.HasSuffix(e.Name(), ".lock") {
				continue
			}
			p.changed = append(p.changed, rel+" (removed)")
			if !p.dry {
				if err := unix.Unlinkat(dfd, e.Name(), 0); err != nil {
					p.errs = append(p.errs, fmt.Errorf("%s: %w", rel, err))
				}
			}
		}
	}
}

// readSmall reads the regular file name below dfd, at most max bytes, without
// following a symlink or blocking.
func readSmall(dfd int, name string, max int64) ([]byte, bool) {
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, false
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size >= max {
		return nil, false
	}
	b, err := io.ReadAll(io.LimitReader(f, max))
	return b, err == nil
}

// checkIndex refuses to put back an index (idx) that names a path Git must not write
// (gitguard.UnsafeIndexPaths), read with the object id size of the Git dir gfd's
// config. A snapshot taken while another session of the repository ran holds the
// index that session wrote, which its audit moved out of .git afterwards: put back,
// the operator's next git checkout -- . would write what it names, a hook included.
func checkIndex(gfd int, idx []byte) error {
	hashSize := 20
	if cfg, ok := readSmall(gfd, "config", gitconfig.MaxFileSize); ok {
		entries, _ := gitconfig.Parse(bytes.NewReader(cfg))
		for _, e := range entries {
			if e.Section == "extensions" && e.Key == "objectformat" && strings.EqualFold(e.Value, "sha256") {
				hashSize = 32
			}
		}
	}
	bad, n, err := gitguard.UnsafeIndexPaths(bufio.NewReader(bytes.NewReader(idx)), hashSize)
	if err != nil {
		return fmt.Errorf("the snapshot's index cannot be read as an index (%v); undo --git does not put it back (agentbox restore gives the snapshot to look at)", err)
	}
	if n > 0 {
		named := make([]string, len(bad))
		for i, b := range bad {
			named[i] = termsafe.Quote(b)
		}
		more := ""
		if n > len(bad) {
			more = fmt.Sprintf(" and %d more", n-len(bad))
		}
		return fmt.Errorf("the snapshot's index names %s%s, where Git must not write (a plant of a session that ran when the snapshot was taken); undo --git does not put it back", strings.Join(named, ", "), more)
	}
	return nil
}
