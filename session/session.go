// Package session runs one sandbox session end to end: it prepares what the policy
// needs on the host (placeholders for protected Git paths, the --disk-tmp directory),
// builds the mount plan, hands it to a backend, and cleans up after it.
package session

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/compat"
	"github.com/agentbox/agentbox/gitguard"
	"github.com/agentbox/agentbox/internal/kernel"
	"github.com/agentbox/agentbox/internal/leafcg"
	"github.com/agentbox/agentbox/internal/safepath"
	"github.com/agentbox/agentbox/internal/termout"
	"github.com/agentbox/agentbox/internal/termsafe"
	"github.com/agentbox/agentbox/internal/treewalk"
	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/netproxy"
	"github.com/agentbox/agentbox/nsinit"
	"github.com/agentbox/agentbox/policy"
	"github.com/agentbox/agentbox/sshagent"
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

	GitSave      GitSaveConfig // P8 metadata snapshot (gitsave.go)
	AllowGitPush bool          // P9 push guard off (pushguard.go)
	NoRecord     bool          // skip the shadow-repo record (record.go)
	// Signals: the native backend's forwarded signals, registered ahead by the
	// caller (nsinit.CatchSignals), who stops them; nil: the launch registers them.
	Signals *nsinit.SignalCatch

	sessionID string // AGENTBOX_SESSION, the kept paths' quarantine names (keep.go)
	gc        *hostGC
}

// RegisterFlags adds the session's flags (beyond the policy's) to fs. Each feature
// registers its own in the file that implements it.
func RegisterFlags(fs *flag.FlagSet, cfg *Config) {
	registerGitSaveFlags(fs, cfg)
	registerPushFlags(fs, cfg)
	registerRecordFlags(fs, cfg)
}

// Outcome is what a session produced, for the audit and the shadow record.
type Outcome struct {
	Start, End     time.Time
	Backend        string // the backend that ran
	BackendVersion string // e.g. "bubblewrap 0.12.0"; agentbox's own for native
	Status         int    // exit status of agentbox exec
	// Signal is the signal that killed the command (0: it exited); Terminal: a
	// terminal session (nsinit.Result.Terminal). In a terminal session killed by a
	// signal, agentbox ends by the same signal (Exit).
	Signal        syscall.Signal
	Terminal      bool
	Left          int            // processes left running when the command ended, killed by the init
	Err           error          // agentbox's own failure, nil when the command ran
	Phases        []nsinit.Phase // per-phase setup timings
	SnapshotZip   string         // the P8 snapshot, "" when none
	AuditFindings []string       // one line per audit finding
	Notes         []string       // what host-side work skipped or could not do, for the record

	// NetRefusals are what the --allow-net proxy refused.
	NetRefusals []netproxy.Refusal
	// SSHAgent are the requests the --ssh-agent filter decided on.
	SSHAgent []sshagent.Event

	// walk is the audit's end walk of the working tree, which the record reuses;
	// nil when there is none or it cannot stand for the tree (the audit moved
	// findings away after it).
	walk *treewalk.Walk
}

// Exit is how agentbox exec ends.
type Exit struct {
	Status int // the command's exit status, 128+N for signal N
	// Signal, when not 0: a terminal session whose command was killed by it. The
	// caller, whose cleanup, audit and record are done, ends by the same signal
	// (nsinit.EndBySignal), as sudo does: the operator's shell then sees an
	// interrupted job, and a Ctrl-C stops its loop ("wait and cooperative exit").
	// Elsewhere (scripts, pipes, CI) agentbox exits with Status.
	Signal syscall.Signal
}

// Run runs the session and returns how agentbox exec ends. An error means agentbox
// itself failed before the command started; the caller exits 125.
//
// Order: protected paths, placeholders, the push guard's staging, the plan and its
// recheck, the backend; from the recheck on, beside the last steps and the
// sandbox's setup, the audit baseline, the record's start state and the metadata
// snapshot, which the command waits for (prelaunch.go); then, whatever the command
// did, the audit and the record's end state.
func Run(cfg Config) (Exit, error) {
	sw := nsinit.NewTimer()
	cfg.gc = &hostGC{}
	cfg.gc.pause() // hostgc.go
	defer cfg.gc.resume()
	if cfg.Policy.Backend == policy.BackendAuto {
		resolved := *cfg.Policy
		resolved.Backend = autoBackend()
		cfg.Policy = &resolved
	}
	p := cfg.Policy
	var spare *nsinit.Prestarted
	if cfg.DryRun == Launch {
		if p.Backend == policy.BackendNative && len(p.AllowNet) == 0 && rawInitWanted() {
			// (--allow-net: the Go init, which creates the proxy's socket.)
			// The init's clone (namespaces, id maps) runs while the steps below
			// prepare its plan; a launch that stops before its backend discards it.
			spare = nsinit.PrestartRaw(p.Offline, cliStdio)
			defer spare.Discard()
		}
		// Before anything looks at the repository: the audit a killed launcher left
		// pending may move things aside.
		auditOrphans(&cfg, p)
		auditDirOrphans(&cfg, p) // adddir.go
	}
	repoID, err := repoIdentity(p.Repo)
	if err != nil {
		return Exit{}, err
	}
	meta, err := linkedWorktree(&cfg, p) // worktree.go: before the protected paths, which cover it
	if err != nil {
		return Exit{}, fmt.Errorf("linked worktree: %w", err)
	}
	if err := checkKeptGitDirs(p, meta.roots); err != nil {
		return Exit{}, err
	}
	sw.Mark(host("repo identity, worktree"))
	protected, err := gitguard.ProtectedPaths(p.Repo, meta.roots...)
	if err != nil {
		return Exit{}, fmt.Errorf("protect Git paths: %w", err)
	}
	added, err := addDirProtected(p)
	if err != nil {
		return Exit{}, err
	}
	protected = append(protected, added...)
	sw.Mark(host("protected paths"))
	s := mounts.Session{Protected: protected, GitRW: meta.ops,
		Pinned:   gitguard.PinnedDirs(append(append([]string{p.Repo}, meta.roots...), p.AddDirs...), protected),
		HostRoot: mounts.IsHostRoot(), ScopeAbstractUnix: kernel.CanScopeAbstractUnix(), DenyPathSockets: kernel.CanDenyPathSockets()}
	if p.ReadOnly {
		s = mounts.Session{HostRoot: s.HostRoot, ScopeAbstractUnix: s.ScopeAbstractUnix, DenyPathSockets: s.DenyPathSockets} // readonly.go: nothing to protect, pin or bind writable
	}

	if cfg.DryRun != Launch {
		if p.DiskTmp {
			s.DiskTmp = filepath.Join(p.CacheDir, "tmp", "SESSION")
		}
		s.ExtraRO = pushGuardDryRun(&cfg, p)
		s.Empty = emptyPaths(p)
		if s.MaskSockets, err = kernel.HostSockets(p); err != nil {
			return Exit{}, err
		}
		if err := dryRunLookPath(p); err != nil {
			return Exit{}, err
		}
		ap, err := dryRunAgent(p) // sshagent.go
		if err != nil {
			return Exit{}, err
		}
		return Exit{}, printPlan(cfg, mounts.Build(ap, s))
	}

	out := Outcome{Start: time.Now(), Backend: p.Backend}
	rec := startRecord(&cfg, p, out.Start)
	cfg.sessionID = sessionID(rec)
	sw.Mark(host("record start"))
	status, err := launch(&cfg, p, &s, &out, rec, repoID, meta.roots, sw, spare)
	out.End, out.Status, out.Err = time.Now(), status, err
	sw.Mark(host("after command"))
	out.Phases = slices.Concat(sw.Phases, out.Phases)
	rec.finish(&cfg, &out)
	sw.Mark(host("record end"))
	if os.Getenv("AGENTBOX_TIMINGS") != "" {
		printPhases(cfg.Stderr, sw.Total(), slices.Concat(out.Phases, sw.Phases[len(sw.Phases)-1:]))
	}
	ex := Exit{Status: status}
	if err == nil && out.Terminal {
		ex.Signal = out.Signal
	}
	return ex, err
}

// launch does the part of Run that can fail before the command starts.
func launch(cfg *Config, p *policy.Policy, s *mounts.Session, out *Outcome, rec *recorder, repoID mounts.FileID, gitDirs []string, sw *nsinit.Timer, spare *nsinit.Prestarted) (int, error) {
	if err := gitguard.EnsurePlaceholders(s.Protected); err != nil {
		return 0, err
	}
	if err := prepareKept(p); err != nil {
		return 0, err
	}
	masks, err := kernel.HostSockets(p)
	if err != nil {
		return 0, err
	}
	s.MaskSockets = masks
	empty, err := emptySources(p)
	if err != nil {
		return 0, err
	}
	s.Empty = empty
	sw.Mark(host("placeholders"))
	writable := append([]string{p.Repo}, p.AddDirs...)
	for _, op := range s.GitRW {
		writable = append(writable, op.Source)
	}
	guard, err := preparePushGuard(cfg, p, writable)
	if err != nil {
		return 0, err
	}
	defer guard.cleanup()
	sw.Mark(host("push guard"))
	s.ExtraRO = guard.ops
	if p.DiskTmp {
		dir, release, err := makeDiskTmp(p.CacheDir)
		if err != nil {
			return 0, err
		}
		defer release()
		s.DiskTmp = dir
	}
	agent, err := startAgent(p) // sshagent.go
	if err != nil {
		return 0, err
	}
	defer agent.stop()
	plan := mounts.Build(agent.policy(p), *s)
	plan.Env = append(plan.Env, sshProxyEnv(p)...)
	if err := verifyLaunch(p, repoID, s.Protected, &plan); err != nil {
		return 0, err
	}
	if err := keptIdentities(p, &plan); err != nil {
		return 0, err
	}
	// From here on, the host work the command waits for runs beside the steps
	// below and the sandbox's setup (prelaunch.go). Not before the recheck: a
	// launch it refuses takes no snapshot and applies no retention (a concurrent
	// session could have pointed .git/commondir at a decoy that evicts every
	// older snapshot; a red-team helper did).
	pre := startPrelaunch(cfg, p, rec, gitDirs)
	// gate: the launch went past beforeExec, so the command may have started — even
	// when the backend then fails: an init that dies (or is killed) before it reports
	// the command's start may have started it all the same.
	gate := false
	beforeExec := func() error {
		if err := pre.wait(out); err != nil {
			return err
		}
		gate = true
		cfg.gc.commandStarted()
		return nil
	}
	// The audit looks at what a session did. Once anything of the sandbox's may have
	// run, it runs whatever the backend reports, and the journal stays until it has:
	// only a launch stopped before the gate, whose command certainly never ran, drops
	// it (and prints nothing but agentbox's one-line error).
	defer func() {
		_ = pre.wait(out) // a launch that failed before its backend waited for it
		pre.dirs.finish(cfg, out, gate)
		switch {
		case pre.aud == nil:
		case gate:
			pre.aud.finish(cfg, out)
		default:
			pre.aud.drop()
		}
	}()
	agents := startAgentAudit(cfg, p, out)
	setSessionEnv(p, cfg.sessionID)
	agent.setEnv()
	locks := existingLocks(s.Protected)
	defer func() { removeStaleLocks(cfg.Stderr, s.Protected, locks) }() // bounded by then (termout)
	sw.Mark(host("plan, recheck"))
	// The session's own cgroup (P12): nothing inside reaches the launcher's.
	leaf, err := leafcg.Prepare(fmt.Sprintf("agentbox-%d-%d", os.Getpid(), time.Now().UnixNano()))
	if err != nil {
		return 0, err
	}
	var afterStart func(int) error
	if leaf != nil {
		afterStart = leaf.Place
		defer func() {
			if err := leaf.Remove(); err != nil {
				fmt.Fprintf(cfg.Stderr, "agentbox: %v\n", err)
			}
		}()
	}
	netSvc, err := startNet(p)
	if err != nil {
		return 0, err
	}
	res, err := runBackend(cfg, plan, out, spare, beforeExec, afterStart, netSvc.listenerFunc())
	cfg.gc.commandEnded()
	out.NetRefusals = netSvc.stop()
	agentEvents, agentNotes := agent.stop()
	out.SSHAgent, out.Notes = agentEvents, append(out.Notes, agentNotes...)
	sw.Skip()
	agents.finish(cfg, out)
	_ = pre.wait(out) // a backend that failed before its gate did not wait for it
	out.Phases = slices.Concat(pre.phases, res.Phases)
	if err != nil {
		return 0, err
	}
	out.Signal, out.Terminal, out.Left = res.Signal, res.Terminal, res.Left
	// From here on, the launcher's lines go to a terminal the command may have left
	// unable to take them: bounded, never blocking for ever (termout).
	cfg.Stderr = termout.Bounded(cfg.Stderr)
	reportLeft(cfg, res.Left)
	return res.Status, nil
}

// reportLeft says once that the session's background processes were killed when the
// command ended (nothing of a session outlives it: by design, but not silently).
func reportLeft(cfg *Config, n int) {
	switch {
	case n == 1:
		fmt.Fprintln(cfg.Stderr, "agentbox: killed 1 process left running")
	case n > 1:
		fmt.Fprintf(cfg.Stderr, "agentbox: killed %d processes left running\n", n)
	}
}

// EnvInit chooses the native backend's runner of the compiled plan: "go" runs the
// re-executed Go init where the raw init would run (amd64, Linux 5.12+), so that
// the behaviour table, a bug report or a benchmark can compare the two runners of
// one program. Anything else: the raw init where it can run.
const EnvInit = "AGENTBOX_INIT"

func rawInitWanted() bool { return os.Getenv(EnvInit) != "go" }

// cliStdio are the command's streams: agentbox exec's own.
var cliStdio = nsinit.Stdio{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}

// runBackend runs plan; spare is the native init started ahead (nil: none), and
// beforeExec the host work the command waits for (nsinit.Options.BeforeExec).
// afterStart places the session's PID 1 (nsinit.Options.AfterStart), and listener
// serves the proxy's socket of a plan with --allow-net (nil: none).
func runBackend(cfg *Config, plan mounts.Plan, out *Outcome, spare *nsinit.Prestarted, beforeExec func() error, afterStart func(int) error, listener func(*os.File)) (nsinit.Result, error) {
	opts := nsinit.Options{Stdio: cliStdio, BeforeExec: beforeExec, AfterStart: afterStart, Listener: listener}
	var driver nsinit.Driver
	switch cfg.Policy.Backend {
	case policy.BackendNative:
		out.Backend, out.BackendVersion = policy.BackendNative, "agentbox "+Version
		opts.RawInit, opts.Signals = rawInitWanted(), cfg.Signals
		driver = nsinit.Native{Spare: spare}
	case policy.BackendBwrap:
		// The same plan through bubblewrap >= 0.12.0 (compat; bwrapcheck gates the
		// binary).
		spare.Discard()
		out.Backend = policy.BackendBwrap
		driver = compat.Driver{}
	default:
		return nsinit.Result{}, fmt.Errorf("backend %s: not available", cfg.Policy.Backend)
	}
	res, err := driver.Run(plan, opts)
	if res.BackendVersion != "" {
		out.BackendVersion = res.BackendVersion
	}
	if cfg.Policy.Backend == policy.BackendNative {
		err = explainRefusal(err)
	}
	return res, err
}

// explainRefusal replaces a native setup failure that a missing kernel feature
// explains (no user namespace, no overlay in one, a masked /proc…) with the words
// 'agentbox doctor' uses for it, measured now: the failure path alone pays for the
// probe. Any other error is returned as it is.
func explainRefusal(err error) error {
	var se *nsinit.SetupError
	if !errors.As(err, &se) || (se.Step != "create namespaces" && se.Step != "mount") {
		return err
	}
	exe, xerr := os.Executable()
	if xerr != nil {
		return err
	}
	if msg := kernel.Probe(kernel.Options{Command: []string{exe, "doctor"}}).Refusal(); msg != "" {
		return errors.New(msg)
	}
	return err
}

// autoBackend picks native where the kernel lets it build the sandbox — it needs
// open_tree/move_mount (Linux 5.2), which a container's seccomp filter may also hide
// — and bwrap otherwise. Both need unprivileged user namespaces; where those are off,
// native runs and explains why it cannot start ('agentbox doctor' says more).
func autoBackend() string {
	if kernel.DetectSyscalls().NewMountAPI {
		return policy.BackendNative
	}
	return policy.BackendBwrap
}

// dryRunLookPath refuses, as the launch would, a command that is not there. The host's
// view stands in for the sandbox's, except for what the sandbox replaces: its /tmp
// and /run start empty.
func dryRunLookPath(p *policy.Policy) error {
	name := p.Command[0]
	if strings.Contains(name, "/") && !filepath.IsAbs(name) {
		name = filepath.Join(p.Workdir, name)
	}
	var dirs []string
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		if d == "" || !filepath.IsAbs(d) {
			d = filepath.Join(p.Workdir, d)
		}
		if !policy.Within(d, "/tmp") && !policy.Within(d, "/run") {
			dirs = append(dirs, d)
		}
	}
	if _, err := nsinit.LookPath(name, strings.Join(dirs, string(filepath.ListSeparator))); err != nil {
		return fmt.Errorf("command %s: %w", p.Command[0], err)
	}
	return nil
}

func printPlan(cfg Config, plan mounts.Plan) error {
	if cfg.DryRun == DryRunText && cfg.Policy.Backend == policy.BackendBwrap {
		// --backend bwrap: the exact bwrap argv, after the same binary check (compat).
		return compat.DryRun(cfg.Stdout, plan)
	}
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
// CACHE/tmp, and claims it for this launcher (gc.go) so that `agentbox gc` leaves it
// alone while the launcher lives. release removes the directory, then the claim.
func makeDiskTmp(cache string) (dir string, release func(), err error) {
	parent := filepath.Join(cache, "tmp")
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return "", nil, fmt.Errorf("--disk-tmp: create %s: %w", parent, err)
	}
	dir, err = os.MkdirTemp(parent, fmt.Sprintf("%d-%s-", os.Getpid(), time.Now().Format("20060102-150405")))
	if err != nil {
		return "", nil, fmt.Errorf("--disk-tmp: create session dir in %s: %w", parent, err)
	}
	lock, err := claimDir(dir)
	if err == nil {
		err = os.Chmod(dir, 0o700)
	}
	// The sandbox owned this directory as its /tmp and may have left anything in it:
	// mode-000 or read-only directories, FIFOs, nesting deeper than PATH_MAX. Removed
	// with safepath.RemoveAll, which copes with each and follows no symlink.
	release = func() {
		if err := safepath.RemoveAll(dir); err != nil {
			// The error names what the sandbox left: a file name it chose.
			fmt.Fprintf(os.Stderr, "agentbox: --disk-tmp: %s (agentbox gc retries)\n", termsafe.String(err.Error()))
			return // keep the claim's file: gc decides by the lock, which dies with us
		}
		lock.release()
	}
	if err != nil {
		release()
		return "", nil, fmt.Errorf("--disk-tmp: %s: %w", dir, err)
	}
	return dir, release, nil
}
