package record

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/gitguard/snapshot"
	"github.com/agentbox/agentbox/internal/hostpath"
	"github.com/agentbox/agentbox/internal/termsafe"
	"github.com/agentbox/agentbox/policy"
)

// GitSaveConfig are the flags of the P8 metadata snapshot.
type GitSaveConfig struct {
	Disabled bool   // --no-git-save, --git-save-disabled: no snapshot
	Dir      string // --git-save-dir: the snapshot store; "" is STATE/snapshots
	Keep     int    // --git-save-keep: snapshots kept per repository; 0 keeps all
	KeepSize string // --git-save-keep-size: distinct bytes kept per repository ("" is the default, "0" none)
	MaxSize  string // --git-save-max-size: bound on the new bytes one save stores ("" is the default)
}

// DefaultKeepSize is the default byte budget of a repository's kept snapshots.
const DefaultKeepSize = "4G"

// parseSize reads a byte count with an optional binary suffix (K, M, G, T).
func parseSize(s string) (int64, error) {
	mult := int64(1)
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 'K', 'k':
			mult = 1 << 10
		case 'M', 'm':
			mult = 1 << 20
		case 'G', 'g':
			mult = 1 << 30
		case 'T', 't':
			mult = 1 << 40
		}
		if mult > 1 {
			s = s[:n-1]
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v <= 0 || v > math.MaxInt64/mult {
		return 0, fmt.Errorf("not a positive size")
	}
	return v * mult, nil
}

// skipHint ends every snapshot failure: the launch stops, and the user is told how to
// go on.
const skipHint = "use --git-save-dir DIR to save it elsewhere, or --no-git-save to launch without it"

// Snapshot writes the P8 metadata snapshot before launch and returns its record's
// path ("" when none was written). An error stops the launch (exit 125). What the
// snapshot left out (FIFOs, sockets, devices in the Git dir) is said on stderr and
// returned as notes, for the record.
func Snapshot(cfg *Config, p *policy.Policy) (path string, notes []string, err error) {
	g := cfg.GitSave
	if g.Disabled {
		return "", nil, nil
	}
	if g.Keep < 0 {
		return "", nil, fmt.Errorf("--git-save-keep %d: must be 0 (keep all) or more", g.Keep)
	}
	var maxBytes int64
	if g.MaxSize != "" {
		var err error
		if maxBytes, err = parseSize(g.MaxSize); err != nil {
			return "", nil, fmt.Errorf("--git-save-max-size %q: %v (e.g. 20G)", g.MaxSize, err)
		}
	}
	var keepBytes int64
	if g.KeepSize != "0" && g.KeepSize != "" {
		var err error
		if keepBytes, err = parseSize(g.KeepSize); err != nil {
			return "", nil, fmt.Errorf("--git-save-keep-size %q: %v (e.g. 4G, or 0 for no byte budget)", g.KeepSize, err)
		}
	}
	dir := g.Dir
	if dir == "" {
		if p.StateDir == "" || !filepath.IsAbs(p.StateDir) {
			return "", nil, fmt.Errorf("no state directory for the Git metadata snapshots ($XDG_STATE_HOME and $HOME unset) (%s)", skipHint)
		}
		dir = filepath.Join(p.StateDir, "snapshots")
		if err := os.MkdirAll(p.StateDir, 0o700); err != nil {
			return "", nil, fmt.Errorf("snapshot store %s: %w (%s)", dir, err, skipHint)
		}
		var err error
		if dir, err = evalParent(dir); err != nil {
			return "", nil, fmt.Errorf("snapshot store %s: %w (%s)", dir, err, skipHint)
		}
	} else {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return "", nil, fmt.Errorf("--git-save-dir %s: %w", dir, err)
		}
		// Never in a Git directory (policy/grant.go): the store's files would be
		// written where the operator's Git reads its hooks and config.
		if _, err := policy.CheckGrant("--git-save-dir", dir, abs, policy.GrantTree); err != nil {
			return "", nil, err
		}
		if err := os.MkdirAll(abs, 0o700); err != nil {
			return "", nil, fmt.Errorf("--git-save-dir %s: %w (%s)", dir, err, skipHint)
		}
		// Resolved, so that the inside-the-repository check sees through symlinks.
		if dir, err = filepath.EvalSymlinks(abs); err != nil {
			return "", nil, fmt.Errorf("--git-save-dir %s: %w", abs, err)
		}
		// Nor in another writable grant: a session could rewrite the snapshots
		// that undo --git and restore put back, and plant what retention removes.
		grants := append([]string(nil), p.AddDirs...)
		for _, k := range p.Keep {
			grants = append(grants, k.Path)
		}
		for _, w := range grants {
			if hostpath.Within(dir, w) {
				return "", nil, fmt.Errorf("--git-save-dir %s: lies in %s, which the sandbox can write (%s)", dir, w, skipHint)
			}
		}
	}
	snap, err := snapshot.SaveStored(snapshot.SnapshotOptions{
		Repo:      p.Repo,
		Dir:       dir,
		Keep:      g.Keep,
		KeepBytes: keepBytes,
		Version:   cfg.Version,
		MaxBytes:  maxBytes,
		Progress:  terminal(cfg.Stderr),
	})
	if err != nil {
		return "", nil, fmt.Errorf("%w (%s)", err, skipHint)
	}
	if snap == nil {
		return "", nil, nil
	}
	for _, line := range snap.Skipped {
		notes = append(notes, "snapshot: "+line)
		if cfg.Stderr != nil {
			fmt.Fprintf(cfg.Stderr, "agentbox: snapshot: skipped %s\n", termsafe.String(line))
		}
	}
	if snap.PruneErr != nil && cfg.Stderr != nil {
		fmt.Fprintf(cfg.Stderr, "agentbox: warning: %v\n", snap.PruneErr)
	}
	return snap.Path, notes, nil
}

// evalParent resolves the symlinks of dir's parent (dir itself may not exist yet),
// so that the inside-the-repository check sees through them.
func evalParent(dir string) (string, error) {
	parent, err := filepath.EvalSymlinks(filepath.Dir(dir))
	if err != nil {
		return "", err
	}
	return filepath.Join(parent, filepath.Base(dir)), nil
}

// terminal is w when it is a terminal (progress lines are for people), else nil.
func terminal(w io.Writer) io.Writer {
	f, ok := w.(*os.File)
	if !ok {
		return nil
	}
	if _, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS); err != nil {
		return nil
	}
	return w
}
