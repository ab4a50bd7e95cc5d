package prepare

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/gitguard"
	"github.com/agentbox/agentbox/gitguard/gitconfig"
	"github.com/agentbox/agentbox/internal/safepath"
	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/policy"
)

// gitCopyHeader is the first line of every copy: what the file inside is.
const gitCopyHeader = "copy shown by agentbox --hide-secrets: entries holding a credential were left out"

// gitConfigCopy is one copy to write before the launch: its content, and its path
// in the cache (named by the hash of the content).
type gitConfigCopy struct {
	path    string
	content []byte
}

// gitConfigCopies decides, under --hide-secrets, which of the protected Git config
// files hold a credential (policy.GitConfigCopy): each gets Copy set to the path
// its copy will have, and the launch lines for it. Nothing is written here (a dry
// run shows the plan as is); writeGitConfigCopies writes them.
//
// Every existing protected file but a directory is read as a config (config,
// config.worktree, an include target); one that does not parse is shown empty,
// unless it is a pointer Git never reads as config (.git, commondir, gitdir). The
// read follows no FIFO or device, and a file larger than gitconfig.MaxFileSize
// counts as unparsable: its tail would otherwise be left unread and shown.
func gitConfigCopies(p *policy.Policy, prot []mounts.Protected) ([]mounts.Protected, []gitConfigCopy, []string) {
	if !p.GitConfigCopies {
		return prot, nil, nil
	}
	protectedN := len(prot)
	prot = append(prot, readableGitConfigs(append([]string{p.Repo}, p.AddDirs...), prot)...)
	var copies []gitConfigCopy
	var notes []string
	for i, g := range prot {
		if !g.Exists || g.Dir {
			continue
		}
		entries, err := readRepoGitConfig(g.Path)
		if err != nil {
			switch filepath.Base(g.Path) {
			case ".git", "commondir", "gitdir":
				continue
			}
		}
		keep, lines, changed := policy.GitConfigCopy(g.Path, entries, err)
		if !changed {
			continue
		}
		content := []byte(gitconfig.Format(gitCopyHeader, keep))
		sum := sha256.Sum256(content)
		c := gitConfigCopy{path: filepath.Join(p.CacheDir, "gitconfig", hex.EncodeToString(sum[:])), content: content}
		prot[i].Copy = c.path
		copies = append(copies, c)
		notes = append(notes, lines...)
	}
	// Of the configs added, only those with a copy to bind.
	out := append(prot[:protectedN:protectedN], slices.DeleteFunc(prot[protectedN:], func(g mounts.Protected) bool { return g.Copy == "" })...)
	return out, copies, notes
}

// readableGitConfigs are the configs Git reads for each work tree of roots that the
// protected set leaves out because no writable root holds them: a linked
// worktree's common dir kept read-only (its metadata unverified, or --read-only),
// and that worktree's own gitdir in it. They are read-only already, but readable:
// a copy is bound over one that holds a credential as over a protected one.
func readableGitConfigs(roots []string, prot []mounts.Protected) []mounts.Protected {
	have := map[string]bool{}
	for _, g := range prot {
		have[g.Path] = true
	}
	var out []mounts.Protected
	for _, root := range roots {
		gitdir, err := gitguard.FindGitDir(root)
		if err != nil || gitdir == "" {
			continue
		}
		for _, dir := range []string{gitdir, gitguard.ReadCommonDir(gitdir)} {
			for _, name := range []string{"config", "config.worktree"} {
				if dir == "" {
					continue
				}
				path, err := filepath.EvalSymlinks(filepath.Join(dir, name))
				if err != nil || have[path] {
					continue
				}
				if fi, err := os.Stat(path); err != nil || !fi.Mode().IsRegular() {
					continue
				}
				have[path] = true
				out = append(out, mounts.Protected{Path: path, Exists: true})
			}
		}
	}
	return out
}

// readRepoGitConfig parses a Git config file of the repository: a regular file
// (opened without blocking on a FIFO), at most gitconfig.MaxFileSize.
func readRepoGitConfig(path string) ([]gitconfig.Entry, error) {
	f, err := safepath.OpenRegularFollow(path)
	if errors.Is(err, safepath.ErrNotRegular) {
		return nil, errors.New("not a regular file")
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, gitconfig.MaxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > gitconfig.MaxFileSize {
		return nil, fmt.Errorf("larger than %d MiB", gitconfig.MaxFileSize>>20)
	}
	return gitconfig.Parse(bytes.NewReader(data))
}

// writeGitConfigCopies writes each copy into the cache's gitconfig/ directory:
// under a fresh name with O_EXCL|O_NOFOLLOW, mode 0600, synced, then renamed onto
// its hash name. A copy holds no credential, so one left behind is harmless, and
// two sessions of one content share the name (the rename swaps in the same bytes;
// a bind already made keeps its inode).
func writeGitConfigCopies(cacheDir string, copies []gitConfigCopy) error {
	if len(copies) == 0 {
		return nil
	}
	dir := filepath.Join(cacheDir, "gitconfig")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("--hide-secrets: %w", err)
	}
	dfd, err := safepath.Open(dir, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return fmt.Errorf("--hide-secrets: %s: %w", dir, err)
	}
	defer unix.Close(dfd)
	for _, c := range copies {
		var r [8]byte
		if _, err := rand.Read(r[:]); err != nil {
			return err
		}
		if err := safepath.ReplaceAt(dfd, ".tmp-"+hex.EncodeToString(r[:]), filepath.Base(c.path), c.content, 0o600, true); err != nil {
			return fmt.Errorf("--hide-secrets: write %s: %w", c.path, err)
		}
	}
	return nil
}
