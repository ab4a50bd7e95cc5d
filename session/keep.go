package session

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/agentcfg"
	"github.com/agentbox/agentbox/gitguard/audit"
	"github.com/agentbox/agentbox/internal/safepath"
	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/policy"
)

// Environment variables the command finds set: it runs inside agentbox, and in
// which session (the shadow record's id, as `agentbox show` takes it).
const (
	EnvInside  = "AGENTBOX"
	EnvSession = "AGENTBOX_SESSION"
)

// sessionID names this session: its shadow record, else a fresh audit id.
func sessionID(r *recorder) string {
	if r != nil && r.base.ID != "" {
		return r.base.ID
	}
	return audit.NewAuditID()
}

// setSessionEnv puts the markers into the environment the command inherits (both
// backends pass the launcher's environment on), and unsets SSH_AUTH_SOCK unless
// its socket is handed in (--allow-socket): inside it would name nothing, or, in
// HOME, an agent the user did not hand in.
func setSessionEnv(p *policy.Policy, id string) {
	os.Setenv(EnvInside, "1")
	os.Setenv(EnvSession, id)
	setPromptMarker(p)
	if sock := os.Getenv("SSH_AUTH_SOCK"); sock != "" {
		handed := false
		for _, s := range p.Sockets {
			if c, err := filepath.EvalSymlinks(sock); err == nil && c == s.Path {
				handed = true
			}
		}
		if !handed {
			os.Unsetenv("SSH_AUTH_SOCK")
		}
	}
}

// prepareKept creates, on the host, what a preset keeps and is missing (an empty
// directory, mode 0700, or a file with the preset's content, mode 0600), so that
// there is something to bind, and the read-only directories inside the kept ones,
// as Git's hooks placeholder is created (P7). Nothing is followed: a component
// that is a symlink stops the launch.
func prepareKept(p *policy.Policy) error {
	for _, k := range p.Keep {
		if !k.Create {
			continue
		}
		if err := createBeneath(k.Path, k.Dir, k.Init); err != nil {
			return fmt.Errorf("%s: create %s: %w", k.From, k.Path, err)
		}
	}
	for _, d := range append(append([]string(nil), p.KeepReadOnly...), p.KeepPrivate...) {
		if err := createBeneath(d, true, ""); err != nil {
			return fmt.Errorf("--keep-agent: create %s: %w", d, err)
		}
	}
	return nil
}

// createBeneath creates path (a directory, or a file holding init) unless it
// exists as that, and fails when it exists as something else.
func createBeneath(path string, dir bool, init string) error {
	parent, name := filepath.Split(path)
	dfd, err := safepath.Open(filepath.Clean(parent), unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	if dir {
		err = unix.Mkdirat(dfd, name, 0o700)
	} else {
		var fd int
		fd, err = unix.Openat(dfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err == nil {
			_, err = unix.Write(fd, []byte(init))
			unix.Close(fd)
		}
	}
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return err
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	switch {
	case dir && st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return errors.New("exists and is not a directory")
	case !dir && st.Mode&unix.S_IFMT != unix.S_IFREG:
		return errors.New("exists and is not a regular file")
	}
	return nil
}

// checkKeptGitDirs refuses a kept path holding one of the Git directories this
// session protects outside the repository (a linked worktree's common dir): kept,
// its config and hooks would be writable, undoing P7.
func checkKeptGitDirs(p *policy.Policy, gitDirs []string) error {
	for _, k := range p.Keep {
		for _, d := range gitDirs {
			if policy.Within(d, k.Path) || policy.Within(k.Path, d) {
				return &policy.Error{What: k.From, Path: k.Path, Reason: "holds the Git directory " + d + " of this worktree, whose config and hooks must stay read-only (P7)"}
			}
		}
	}
	return nil
}

// keptIdentities gives every kept and added bind the identity its source has now, which
// the backends check again on the source they open (mounts.Op.SourceID): a path
// swapped after the policy checked it is refused.
func keptIdentities(p *policy.Policy, plan *mounts.Plan) error {
	want := map[string]bool{}
	for _, k := range p.Keep {
		want[k.Path] = true
	}
	for _, d := range p.KeepReadOnly {
		want[d] = true
	}
	for _, d := range p.AddDirs {
		want[d] = true
	}
	for i, op := range plan.Ops {
		if !want[op.Source] || (op.Kind != mounts.Bind && op.Kind != mounts.BindRO) {
			continue
		}
		id, err := identify(op.Source)
		if err != nil {
			return fmt.Errorf("%s changed while agentbox was starting (%v); not launching", op.Source, err)
		}
		plan.Ops[i].SourceID = id
	}
	return nil
}

// startAgentAudit registers the session in the kept paths' ledger (agentcfg), which
// takes its baseline — the ledger's own where another live session keeps the same
// files — after auditing sessions whose launchers died; nil when nothing is kept.
// Without a ledger the audit still runs, from a baseline of its own.
func startAgentAudit(cfg *Config, p *policy.Policy, out *Outcome) *agentAudit {
	if len(p.Keep) == 0 {
		return nil
	}
	opt := agentcfg.Options{Home: p.Home, Repo: p.Repo, ID: cfg.sessionID}
	for _, k := range p.Keep {
		opt.Kept = append(opt.Kept, k.Path)
	}
	if p.StateDir == "" {
		fmt.Fprintf(cfg.Stderr, "agentbox: warning: kept paths: no state directory; if this launcher is killed, the session goes unaudited\n")
		return &agentAudit{base: agentcfg.Snapshot(opt)}
	}
	s, orphans, err := agentcfg.Begin(p.StateDir, opt)
	for _, o := range orphans {
		fmt.Fprintf(cfg.Stderr, "agentbox: audit: kept paths: session %s was killed before its audit; audited now: %d finding(s)\n", o.ID, len(o.Findings))
		report(cfg, out, o.Findings)
	}
	if err != nil {
		fmt.Fprintf(cfg.Stderr, "agentbox: warning: %v: if this launcher is killed, the session goes unaudited\n", err)
		return &agentAudit{base: agentcfg.Snapshot(opt)}
	}
	return &agentAudit{ledger: s}
}

// agentAudit is one session's audit of its kept paths: through the ledger, or
// from a baseline of its own when the ledger could not be used.
type agentAudit struct {
	ledger *agentcfg.Session
	base   *agentcfg.Baseline
}

// finish puts back what the session added to the kept exec surface and reports
// it, one line per finding, like the Git audit. It runs even when the backend
// reports a failure: the command may have started before it, and an audit of a
// session that wrote nothing finds nothing.
func (a *agentAudit) finish(cfg *Config, out *Outcome) {
	switch {
	case a == nil:
	case a.ledger != nil:
		report(cfg, out, a.ledger.Finish())
	default:
		report(cfg, out, a.base.Audit())
	}
}

func report(cfg *Config, out *Outcome, fs []agentcfg.Finding) {
	for _, f := range fs {
		line := f.String()
		out.AuditFindings = append(out.AuditFindings, line)
		fmt.Fprintf(cfg.Stderr, "agentbox: audit: %s\n", line)
	}
}
