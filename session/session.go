// Package session runs one sandbox session end to end: it prepares what the policy
// needs on the host (placeholders for protected Git paths, the --disk-tmp directory),
// builds the mount plan, hands it to a backend, and cleans up after it.
package session

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/agentbox/agentbox/gitguard"
	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/nsinit"
	"github.com/agentbox/agentbox/policy"
)

// Version is agentbox's version, set at build time with -ldflags -X.
var Version = "0.1.0-dev"

// DryRun selects what --dry-run prints.
type DryRun int

// Dry-run modes.
const (
	Launch     DryRun = iota // not a dry run
	DryRunText               // the plan, one operation per line
	DryRunJSON               // the plan as JSON
)

// Config is one session's configuration on top of the policy.
type Config struct {
	Policy *policy.Policy
	DryRun DryRun
	Args   []string // the exec arguments as given, for the session record
	Stdout io.Writer
	Stderr io.Writer
}

// RegisterFlags adds the session's flags (beyond the policy's) to fs.
func RegisterFlags(fs *flag.FlagSet, cfg *Config) {}

// Run runs the session and returns the command's exit status. An error means agentbox
// itself failed before the command started; the caller exits 125.
func Run(cfg Config) (int, error) {
	p := cfg.Policy
	protected, err := gitguard.ProtectedPaths(p.Repo)
	if err != nil {
		return 0, fmt.Errorf("protect Git paths: %w", err)
	}
	s := mounts.Session{Protected: protected}

	if cfg.DryRun != Launch {
		if p.DiskTmp {
			s.DiskTmp = filepath.Join(p.CacheDir, "tmp", "SESSION")
		}
		return 0, printPlan(cfg, mounts.Build(p, s))
	}

	if err := gitguard.EnsurePlaceholders(protected); err != nil {
		return 0, err
	}
	if p.DiskTmp {
		dir, err := makeDiskTmp(p.CacheDir)
		if err != nil {
			return 0, err
		}
		defer os.RemoveAll(dir)
		s.DiskTmp = dir
	}
	plan := mounts.Build(p, s)
	res, err := runBackend(p.Backend, plan)
	if err != nil {
		return 0, err
	}
	return res.Status, nil
}

func runBackend(backend string, plan mounts.Plan) (nsinit.Result, error) {
	switch backend {
	case policy.BackendNative, policy.BackendAuto:
		return nsinit.Run(plan, nsinit.Stdio{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr})
	}
	return nsinit.Result{}, fmt.Errorf("backend %s: not available", backend)
}

func printPlan(cfg Config, plan mounts.Plan) error {
	if cfg.DryRun == DryRunJSON {
		b, err := plan.JSON()
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(cfg.Stdout, "%s\n", b)
		return err
	}
	_, err := io.WriteString(cfg.Stdout, plan.String())
	return err
}

// makeDiskTmp creates the session's --disk-tmp directory, mode 0700, below
// CACHE/tmp. The name carries the launcher's PID so that gc can tell live sessions.
func makeDiskTmp(cache string) (string, error) {
	parent := filepath.Join(cache, "tmp")
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return "", fmt.Errorf("--disk-tmp: create %s: %w", parent, err)
	}
	dir, err := os.MkdirTemp(parent, fmt.Sprintf("%d-%s-", os.Getpid(), time.Now().Format("20060102-150405")))
	if err != nil {
		return "", fmt.Errorf("--disk-tmp: create session dir in %s: %w", parent, err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("--disk-tmp: chmod %s: %w", dir, err)
	}
	return dir, nil
}
