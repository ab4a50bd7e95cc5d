// Package session runs one sandbox session end to end: it prepares what the policy
// needs on the host (placeholders for protected Git paths, the --disk-tmp directory),
// builds the mount plan, hands it to a backend, and cleans up after it.
package session

import (
	"fmt"
	"io"
	"os"
	"slices"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/backend"
	"github.com/agentbox/agentbox/compat"
	"github.com/agentbox/agentbox/internal/termout"
	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/nsinit"
	"github.com/agentbox/agentbox/policy"
	"github.com/agentbox/agentbox/session/hostaudit"
	"github.com/agentbox/agentbox/session/netsvc"
	"github.com/agentbox/agentbox/session/portsvc"
	"github.com/agentbox/agentbox/session/prepare"
	"github.com/agentbox/agentbox/session/record"
)

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
	// Version is agentbox's version, for the record ("agentbox VERSION" ran the
	// sandbox) and the snapshot's metadata.
	Version string
	Stdout  io.Writer
	Stderr  io.Writer

	GitSave      record.GitSaveConfig // P8 metadata snapshot (session/record)
	AllowGitPush bool                 // P9 push guard off (session/prepare)
	NoRecord     bool                 // skip the shadow-repo record (session/record)
	// Notes are the caller's lines for the user (the CLI's: settings that lost to
	// narrower ones, no repository here…), shown as "agentbox: NOTE" once the launch
	// can no longer be refused, just before the command starts: a refusal stays
	// agentbox's one line. Stderr must be safe for a terminal: they name paths.
	Notes []string
	// Signals: the native backend's forwarded signals, registered ahead by the
	// caller (nsinit.CatchSignals), who stops them; nil: the launch registers them.
	Signals *nsinit.SignalCatch

	// What differs between the two doors. The CLI leaves them zero; the Go API
	// (package sandbox) sets them from its Options.
	//
	// Stdio are the command's streams; nil: agentbox's own.
	Stdio *backend.Stdio
	// Env is the command's environment before the session's markers; nil: the
	// launcher's (os.Environ).
	Env []string
	// InitBinary is the agentbox binary re-executed as the Go init; "": the running one.
	InitBinary string
	// InitFile is InitBinary opened and checked (backend.Options.InitFile).
	InitFile *os.File
	// Driver runs the plan (the native backend only); nil: the policy's backend,
	// started as the CLI starts it (raw init, its clone ahead of the plan, a setup
	// failure explained in doctor's words).
	Driver backend.Driver
	// NoAudit skips the post-session Git audit: nothing then finds and quarantines
	// what the session planted that the operator's Git would run (P7's second half).
	// Its baseline and pending journal stay, for a session that starts meanwhile and
	// for a launcher killed mid-session. Only the Go API offers it, as an explicit
	// opt-out.
	NoAudit bool
	// KeepGC leaves the process's garbage collector alone (hostgc.go): a library
	// does not change its caller's settings.
	KeepGC bool

	sessionID string // AGENTBOX_SESSION, the kept paths' quarantine names (hostaudit.StartKept)
	gc        *hostGC
}

// Outcome is what a session produced, for the audit and the shadow record
// (record.Outcome).
type Outcome = record.Outcome

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

// Run runs the session and returns how agentbox exec ends, or, for a dry run, prints
// its plan. An error means agentbox itself failed before the command started; the
// caller exits 125.
func Run(cfg Config) (Exit, error) {
	if cfg.DryRun != Launch {
		plan, err := Plan(cfg)
		if err != nil {
			return Exit{}, err
		}
		return Exit{}, printPlan(cfg, plan)
	}
	out, err := RunSession(cfg)
	ex := Exit{Status: out.Status}
	if err == nil && out.Terminal {
		ex.Signal = out.Signal
	}
	return ex, err
}

// Plan is the mount plan a launch of cfg would run, as --dry-run shows it: made by
// the same preparation step, writing nothing on the host (the --disk-tmp directory
// and the push guard's staging are named, not made; the identities are not taken).
func Plan(cfg Config) (mounts.Plan, error) {
	p := resolveBackend(&cfg)
	pr, err := prepare.New(cfg.prepareOptions(nil), p)
	if err != nil {
		return mounts.Plan{}, err
	}
	if err := pr.ForDryRun(cfg.prepareOptions(nil), p); err != nil {
		return mounts.Plan{}, err
	}
	ap, err := netsvc.DryRunAgent(p)
	if err != nil {
		return mounts.Plan{}, err
	}
	return pr.Plan(ap), nil
}

// resolveBackend settles --backend auto for cfg and returns its policy.
func resolveBackend(cfg *Config) *policy.Policy {
	if cfg.Policy.Backend == policy.BackendAuto {
		resolved := *cfg.Policy
		resolved.Backend = prepare.AutoBackend()
		cfg.Policy = &resolved
	}
	return cfg.Policy
}

// RunSession runs one session end to end — prepare, launch through the backend,
// audit, record — and returns what it produced. An error means agentbox failed
// before the command started; the Outcome then says what the host-side work did.
//
// Order: the audits killed launchers left, the preparation (package prepare: protected
// paths, placeholders, the push guard's staging, the recheck), the plan, the
// backend; beside the last steps and the sandbox's setup, the audit baseline (from
// the placeholders on), the record's start state and the metadata snapshot (from the
// recheck on), which the command waits for (prelaunch.go); then, whatever the
// command did, the audit and the record's end state.
func RunSession(cfg Config) (Outcome, error) {
	sw := backend.NewTimer()
	if !cfg.KeepGC {
		cfg.gc = &hostGC{}
		cfg.gc.pause() // hostgc.go
		defer cfg.gc.resume()
	}
	if cfg.Stderr == nil {
		cfg.Stderr = os.Stderr
	}
	var restoreStderr func()
	cfg.Stderr, restoreStderr = ownDescriptor(cfg.Stderr) // ownstderr.go
	defer restoreStderr()
	// Before anything hands the streams on (the raw init cloned ahead takes them).
	stdio, relays, err := prepare.GuardStdio(cfg.stdio())
	if err != nil {
		return Outcome{Status: 125, Err: err}, err
	}
	defer relays.Stop()
	cfg.Stdio = &stdio
	p := resolveBackend(&cfg)
	var spare *nsinit.Prestarted
	if cfg.Driver == nil && p.Backend == policy.BackendNative && len(p.AllowNet) == 0 && len(p.HostPorts) == 0 && len(p.Publish) == 0 && rawInitWanted() && p.Limits.Memory == 0 {
		// (--allow-net, --host-port, --publish: the Go init, which creates their
		// sockets; --memory: the Go init, runBackend.)
		// The init's clone (namespaces, id maps) runs while the steps below
		// prepare its plan; a launch that stops before its backend discards it.
		spare = nsinit.PrestartRaw(p.Offline, cfg.stdio())
		defer spare.Discard()
	}
	if line := p.RootNotice(); line != "" { // sudo on a user's repository (policy/owner.go)
		cfg.Notes = append([]string{line}, cfg.Notes...)
	}
	cfg.Notes = append(cfg.Notes, p.StartupNotices()...) // policy/startup.go
	cfg.Notes = append(cfg.Notes, p.HideNotices()...)    // policy/hide.go
	// Before anything looks at the repository: the audit a killed launcher left
	// pending may move things aside.
	hostaudit.Orphans(cfg.audit(), p)
	hostaudit.DirOrphans(cfg.audit(), p)
	pr, err := prepare.New(cfg.prepareOptions(sw), p)
	if err != nil {
		return Outcome{Status: 125, Err: err}, err
	}
	cfg.Notes = append(cfg.Notes, pr.Notes...) // the repository's Git configs' copies (prepare/gitcopy.go)
	// Before the record or anything else warns: a session the ledger cannot list
	// does not start, and its refusal is the one line printed.
	if err := prepare.RecordGrants(p, pr.GitDirs); err != nil {
		pr.Close()
		return Outcome{Status: 125, Err: err}, err
	}
	out := Outcome{Start: time.Now(), Backend: p.Backend}
	rec := record.Start(cfg.record(), p, out.Start)
	cfg.sessionID = hostaudit.SessionID(rec.ID())
	sw.Mark(host("record start"))
	l := &launch{cfg: &cfg, p: p, pr: pr, out: &out, rec: rec, sw: sw, spare: spare, relays: relays}
	status, err := l.run()
	if l.unresolved > 0 && status == 0 && err == nil {
		// Never a silent success: the lines above name each place and what to do.
		fmt.Fprintf(cfg.Stderr, "agentbox: audit: %d place(s) above left unchecked where your Git or your agents can reach them; exit 125\n", l.unresolved)
		status = 125
	}
	out.End, out.Status, out.Err = time.Now(), status, err
	sw.Mark(host("after command"))
	out.Phases = slices.Concat(sw.Phases, out.Phases)
	rec.Finish(cfg.record(), &out)
	sw.Mark(host("record end"))
	if l.released != nil {
		l.released() // the end scans' watches, released beside the record's end
	}
	l.ck.removed() // the checkpoint endpoint's files, removed beside the audits and the record's end
	if os.Getenv("AGENTBOX_TIMINGS") != "" {
		printPhases(cfg.Stderr, sw.Total(), slices.Concat(out.Phases, sw.Phases[len(sw.Phases)-1:]))
	}
	if err != nil {
		out.Status = 125
	}
	return out, err
}

// launch is one launch of a prepared session: the part of RunSession that can fail
// before the command starts, and the audit after it.
type launch struct {
	cfg    *Config
	p      *policy.Policy
	pr     *prepare.Prepared
	out    *Outcome
	rec    *record.Recorder
	sw     *backend.Timer
	spare  *nsinit.Prestarted   // the CLI's raw init cloned ahead, nil: none
	relays *prepare.StdioRelays // the streams relayed instead of handed in
	// unresolved: what the audits left where the user's Git may run it, or
	// could not audit (hostaudit.Outcome.Unresolved).
	unresolved int
	released   func() // hostaudit.Outcome.Released of the end audits
	// ck is the checkpoint endpoint; its files are removed beside the audits and
	// the record's end, and waited for before the session returns.
	ck *startingCheckpoints
}

// finishAudits ends the session's audits: once the command may have run (gate),
// they run whatever the backend reported; before, the journals are dropped.
func finishAudits(cfg *Config, p *policy.Policy, out *Outcome, pre *prelaunch, gate bool) (unresolved int, released func()) {
	_ = pre.wait(out) // a launch that failed before its backend waited for it
	var found hostaudit.Outcome
	audit := gate && !cfg.NoAudit
	pre.dirs.Finish(cfg.audit(), &found, audit)
	switch {
	case pre.aud == nil:
	case audit:
		pre.aud.Finish(cfg.audit(), &found)
	default:
		pre.aud.Drop()
	}
	found.Close(cfg.Stderr, p.StateDir, cfg.sessionID)
	out.AuditFindings = append(out.AuditFindings, found.AuditFindings...)
	out.Phases = append(out.Phases, found.Phases...)
	out.Walk = found.Walk
	return found.Unresolved, found.Released
}

// run launches and returns the command's status.
// commandGate is the backend's BeforeExec: the command waits for the host work
// before it (prelaunch.go), and the caller's notes are shown once, when nothing can
// refuse the launch any more; *passed records that the command may have started.
func (l *launch) commandGate(pre *prelaunch, passed *bool) func() error {
	return func() error {
		if err := pre.ready(l.out, l.pr.Session.SourceIDs); err != nil {
			return err
		}
		if !*passed { // once, though a driver may retry on a fresh init
			for _, n := range l.cfg.Notes {
				fmt.Fprintf(l.cfg.Stderr, "agentbox: %s\n", n)
			}
		}
		*passed = true
		l.cfg.gc.commandStarted()
		return nil
	}
}

func (l *launch) run() (int, error) {
	cfg, p, out, sw := l.cfg, l.p, l.out, l.sw
	defer l.pr.Close()
	ckStart := startCheckpoints(p, l.rec) // beside the steps up to the plan (checkpoints.go)
	l.ck = ckStart
	defer ckStart.stop() // a launch that stops before the audits' end is deferred
	if err := l.pr.Placeholders(cfg.prepareOptions(sw), p); err != nil {
		return 0, err
	}
	// From here on, the host work the command waits for runs beside the steps
	// below and the sandbox's setup (prelaunch.go): the audit's baseline at once,
	// the snapshot and the record's start once the recheck has passed (clear).
	pre := startPrelaunch(cfg, p, l.rec, l.pr.GitDirs, l.pr.RepoID())
	// gate: the launch went past beforeExec, so the command may have started — even
	// when the backend then fails: an init that dies (or is killed) before it reports
	// the command's start may have started it all the same. It may run twice (a
	// driver that retries on a fresh init, package sandbox): it only waits.
	gate := false
	beforeExec := l.commandGate(pre, &gate)
	// The audit looks at what a session did. Once anything of the sandbox's may have
	// run, it runs whatever the backend reports, and the journal stays until it has:
	// only a launch stopped before the gate, whose command certainly never ran, drops
	// it (and prints nothing but agentbox's one-line error).
	defer func() {
		n, released := finishAudits(cfg, p, out, pre, gate)
		l.unresolved, l.released = l.unresolved+n, released
	}()
	defer ckStart.stop()   // before the audit's end, which stops the watch a checkpoint reads
	defer pre.clear(false) // a launch that stops before its recheck passed
	if err := l.pr.ForLaunch(cfg.prepareOptions(sw), p); err != nil {
		return 0, err
	}
	agent, err := netsvc.StartAgent(p)
	if err != nil {
		return 0, err
	}
	defer agent.Stop(nil)
	ckpt, steps := ckStart.wait(cfg.Stderr)
	steps.started(pre)
	l.pr.Session.ExtraRO = append(l.pr.Session.ExtraRO, ckpt.Ops()...)
	plan := l.pr.Plan(agent.Policy(p))
	ckpt.Grant(&plan)
	plan.Env = append(plan.Env, netsvc.SSHProxyEnv(p, getenv(cfg.env(), "GIT_SSH_COMMAND"))...)
	if err := prepare.CheckWritableBinds(p, &plan, l.pr.GitDirs); err != nil {
		return 0, err
	}
	pre.clear(true)
	var kept hostaudit.Outcome
	agents, err := hostaudit.StartKept(cfg.audit(), p, cfg.sessionID, &kept)
	l.keptFound(&kept, "-kept-orphans")
	if err != nil {
		return 0, err
	}
	env := sessionEnv(cfg.env(), p, cfg.sessionID)
	env = withPromptMarker(env, p, cfg.stdio().Stdin)
	env = p.Env.Apply(env)  // --hide-secrets, --unset-env, --clear-env
	env = agent.SetEnv(env) // after the rules: the filtered agent's socket is the session's own
	env = ckpt.SetEnv(env)
	defer ckpt.Stop() // before the audit's end (deferred above), which stops the watch a checkpoint reads
	prot := l.pr.Session.Protected
	locks := prepare.ExistingLocks(prot)
	defer func() { prepare.RemoveStaleLocks(cfg.Stderr, prot, locks) }() // bounded by then (termout)
	sw.Mark(host("plan, recheck"))
	// The session's own cgroup (P12): nothing inside reaches the launcher's.
	leaf, err := l.pr.SessionCgroup(p)
	if err != nil {
		return 0, err
	}
	opts := backend.Options{Stdio: cfg.stdio(), Env: env, InitBinary: cfg.InitBinary, InitFile: cfg.InitFile, BeforeExec: beforeExec}
	if leaf != nil {
		opts.AfterStart, opts.Cgroup = leaf.Place, leaf.File()
		defer func() {
			if err := leaf.Remove(); err != nil {
				fmt.Fprintf(cfg.Stderr, "agentbox: %v\n", err)
			}
		}()
	}
	netSvc, err := netsvc.Start(p)
	if err != nil {
		return 0, err
	}
	ports, err := portsvc.Start(p) // --publish binds the host's ports here
	if err != nil {
		return 0, err
	}
	defer ports.Stop()
	opts.Listener, opts.HostPorts, opts.Sockets = netSvc.Listener(), ports.HostPorts(), ports.Sockets()
	meter := record.StartUsage(leaf, p.Limits)
	res, err := l.runBackend(plan, opts)
	l.relays.Stop() // the command's output reaches its files before agentbox's lines
	cfg.gc.commandEnded()
	ckpt.Stop()
	if err == nil {
		out.Usage = meter.Finish()
	}
	out.NetRefusals = netSvc.Stop()
	out.Ports = ports.Stop()
	out.SSHAgent, out.Notes = agent.Stop(out.Notes)
	sw.Skip()
	kept = hostaudit.Outcome{}
	agents.Finish(cfg.audit(), &kept)
	l.keptFound(&kept, "-kept")
	_ = pre.wait(out) // a backend that failed before its gate did not wait for it
	out.Phases = slices.Concat(pre.phases, res.Phases)
	out.Prestarted, out.InitPeakRSSKiB = res.Prestarted, res.InitPeakRSSKiB
	if err != nil {
		return 0, err
	}
	out.Signal, out.Terminal, out.Left = res.Signal, res.Terminal, res.Left
	// From here on, the launcher's lines go to a terminal the command may have left
	// unable to take them: bounded, never blocking for ever (termout).
	cfg.Stderr = termout.Bounded(cfg.Stderr)
	record.ReportLimit(cfg.Stderr, out.Usage)
	reportLeft(cfg, res.Left)
	netsvc.Report(cfg.Stderr, out.NetRefusals)
	return res.Status, nil
}

// keptFound hands what a kept paths' audit found to the session's outcome, its
// lines bounded (hostaudit.Outcome.Close: the list named by the session and suffix).
func (l *launch) keptFound(kept *hostaudit.Outcome, suffix string) {
	kept.Close(l.cfg.Stderr, l.p.StateDir, l.cfg.sessionID+suffix)
	l.out.AuditFindings = append(l.out.AuditFindings, kept.AuditFindings...)
	l.unresolved += kept.Unresolved
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

// stdio are the command's streams: the Go API's, or agentbox exec's own.
func (c *Config) stdio() backend.Stdio {
	if c.Stdio != nil {
		return *c.Stdio
	}
	return backend.Stdio{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}
}

// record is what the snapshot and the shadow record need of the session.
func (c *Config) record() *record.Config {
	return &record.Config{Stderr: c.Stderr, Args: c.Args, Version: c.Version, NoRecord: c.NoRecord, GitSave: c.GitSave}
}

// prepareOptions is what the preparation step needs of the session; sw, when not nil,
// times its steps.
func (c *Config) prepareOptions(sw *backend.Timer) prepare.Options {
	o := prepare.Options{AllowGitPush: c.AllowGitPush, Stderr: c.Stderr}
	if sw != nil {
		o.Mark = func(step string) { sw.Mark(host(step)) }
	}
	return o
}

// audit is what the post-session audits need of the session (package hostaudit).
func (c *Config) audit() *hostaudit.Config {
	return &hostaudit.Config{Stderr: c.Stderr, NoRecord: c.NoRecord, Stdio: c.stdio()}
}

// env is the command's environment before the session's markers (sessionEnv).
func (c *Config) env() []string {
	if c.Env != nil {
		return c.Env
	}
	return os.Environ()
}

// EnvInit chooses the native backend's runner of the compiled plan: "go" runs the
// re-executed Go init where the raw init would run (amd64, Linux 5.12+), so that
// the behaviour table, a bug report or a benchmark can compare the two runners of
// one program. Anything else: the raw init where it can run.
const EnvInit = "AGENTBOX_INIT"

func rawInitWanted() bool { return os.Getenv(EnvInit) != "go" }

// runBackend runs plan through the Go API's driver, or the policy's backend as the
// CLI starts it: the native one with the raw init where wanted and the init cloned
// ahead (l.spare), a setup failure explained in doctor's words.
func (l *launch) runBackend(plan mounts.Plan, opts backend.Options) (backend.Result, error) {
	cfg, out := l.cfg, l.out
	var driver backend.Driver
	switch {
	case cfg.Driver != nil && cfg.Policy.Backend == policy.BackendNative:
		l.spare.Discard()
		out.Backend, out.BackendVersion = policy.BackendNative, "agentbox "+cfg.Version
		driver = cfg.Driver
	case cfg.Driver != nil:
		return backend.Result{}, fmt.Errorf("backend %s: not available through the Go API", cfg.Policy.Backend)
	case cfg.Policy.Backend == policy.BackendNative:
		out.Backend, out.BackendVersion = policy.BackendNative, "agentbox "+cfg.Version
		// The raw init shares the launcher's memory: an OOM kill in the
		// session's memory cgroup would take the launcher with it.
		opts.RawInit, opts.Signals = rawInitWanted() && cfg.Policy.Limits.Memory == 0, cfg.Signals
		driver = nsinit.Native{Spare: l.spare}
	case cfg.Policy.Backend == policy.BackendBwrap:
		// The same plan through bubblewrap >= 0.12.0 (compat; bwrapcheck gates the
		// binary).
		l.spare.Discard()
		out.Backend = policy.BackendBwrap
		driver = compat.Driver{}
	default:
		return backend.Result{}, fmt.Errorf("backend %s: not available", cfg.Policy.Backend)
	}
	res, err := driver.Run(plan, opts)
	if res.BackendVersion != "" {
		out.BackendVersion = res.BackendVersion
	}
	if cfg.Driver == nil && cfg.Policy.Backend == policy.BackendNative {
		err = prepare.ExplainRefusal(err)
	}
	return res, err
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
