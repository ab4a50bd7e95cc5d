package session

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/agentbox/agentbox/gitguard"
	"github.com/agentbox/agentbox/policy"
)

// GitSaveConfig are the flags of the P8 metadata snapshot.
type GitSaveConfig struct {
	Disabled bool   // --no-git-save, --git-save-disabled: no snapshot
	Dir      string // --git-save-dir: where the ZIP goes; "" is the repo's parent directory
	Keep     int    // --git-save-keep: snapshots kept per repository; 0 keeps all
}

func registerGitSaveFlags(fs *flag.FlagSet, cfg *Config) {
	g := &cfg.GitSave
	fs.BoolVar(&g.Disabled, "no-git-save", false, "do not save the repository's Git metadata to a ZIP before launch")
	fs.BoolVar(&g.Disabled, "git-save-disabled", false, "same as --no-git-save")
	fs.StringVar(&g.Dir, "git-save-dir", "", "write the Git metadata snapshot to `DIR` (default: the repository's parent directory)")
	fs.IntVar(&g.Keep, "git-save-keep", gitguard.DefaultKeep, "keep the newest `N` snapshots of the repository, 0 keeps all")
}

// skipHint ends every snapshot failure: the launch stops, and the user is told how to
// go on.
const skipHint = "use --git-save-dir DIR to save it elsewhere, or --no-git-save to launch without it"

// gitSnapshot writes the P8 metadata snapshot before launch and returns the ZIP's path
// ("" when none was written). An error stops the launch (exit 125).
func gitSnapshot(cfg *Config, p *policy.Policy) (string, error) {
	g := cfg.GitSave
	if g.Disabled {
		return "", nil
	}
	if g.Keep < 0 {
		return "", fmt.Errorf("--git-save-keep %d: must be 0 (keep all) or more", g.Keep)
	}
	dir := g.Dir
	if dir != "" {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return "", fmt.Errorf("--git-save-dir %s: %w", dir, err)
		}
		if err := os.MkdirAll(abs, 0o700); err != nil {
			return "", fmt.Errorf("--git-save-dir %s: %w (%s)", dir, err, skipHint)
		}
		// Resolved, so that the inside-the-repository check sees through symlinks.
		if dir, err = filepath.EvalSymlinks(abs); err != nil {
			return "", fmt.Errorf("--git-save-dir %s: %w", abs, err)
		}
	}
	snap, err := gitguard.SaveSnapshot(gitguard.SnapshotOptions{
		Repo:    p.Repo,
		Dir:     dir,
		Keep:    g.Keep,
		Version: Version,
	})
	if err != nil {
		return "", fmt.Errorf("%w (%s)", err, skipHint)
	}
	if snap == nil {
		return "", nil
	}
	if snap.PruneErr != nil && cfg.Stderr != nil {
		fmt.Fprintf(cfg.Stderr, "agentbox: warning: %v\n", snap.PruneErr)
	}
	return snap.Path, nil
}
