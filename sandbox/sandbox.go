// Package sandbox is agentbox's Go API: a Go program calls Run to start one command
// in the native sandbox, without the agentbox CLI in between.
//
// Run is a session of `agentbox exec --backend native`, through the same session
// core (package session): the same preparation of the plan — host read-only (P1),
// one writable repository (P2), HOME a disposable overlay (P3), private /tmp and /run
// (P4), new namespaces (P5, with the network namespace when Offline), the Git exec
// surface read-only and pinned, linked worktrees, host sockets masked, every bind
// rechecked right before the launch (P6, P7) — and the same host work around it: the
// metadata snapshot (P8), the push guard (P9), the post-session audit that
// quarantines what the session planted for the operator's Git (P7), the shadow
// record. Each of the last four can be turned off, explicitly, with an Options field
// that says what it gives up.
//
// The sandbox's init is a re-execution of an agentbox binary. Either the calling
// program is that binary — it calls Init first thing in main, as with docker's
// reexec — or Options.InitBinary names an installed agentbox of the same version
// (the plan travels between the two as agentbox's internal protocol).
//
// Use it when not: the sandbox can read what the calling user can read (P11); it is
// not a secret boundary.
package sandbox

import (
	"errors"
	"fmt"
	"github.com/agentbox/agentbox/internal/termsafe"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"

	"github.com/agentbox/agentbox/backend"
	"github.com/agentbox/agentbox/gitguard/snapshot"
	"github.com/agentbox/agentbox/internal/grantledger"
	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/nsinit"
	"github.com/agentbox/agentbox/policy"
	"github.com/agentbox/agentbox/session"
	"github.com/agentbox/agentbox/session/record"
)

// Options describe one sandboxed command. Command is required; every other zero
// value picks the default named on the field.
type Options struct {
	// Command is the argv run inside; Command[0] is looked up in the sandbox's view
	// with the command's PATH.
	Command []string
	// Repo is the one writable directory; empty: the Git top level of Dir, else Dir.
	// The rules of `agentbox exec --repo` apply (not "/", not $HOME, /tmp … or an
	// ancestor of them).
	Repo string
	// Dir is the command's working directory; empty: the caller's. Outside Repo the
	// command starts in Repo.
	Dir string
	// Home is the HOME overlaid read-write-but-disposable; empty: $HOME; "/": none.
	// It moves the command's HOME only (set HOME in Env to match): agentbox's state
	// and config, the start-up files kept read-only and P6's refusal stay those of
	// this program's environment ($XDG_STATE_HOME, $XDG_CONFIG_HOME, $HOME), which
	// the operator's shells and agentbox commands use.
	Home string
	// Env is the command's environment; nil: the caller's (os.Environ).
	Env []string
	// UnsetEnv, ClearEnv and SecretEnv take variables out of Env as agentbox exec's
	// --unset-env, --clear-env and --hide-secrets do (policy.EnvRules).
	UnsetEnv  []string
	ClearEnv  bool
	SecretEnv bool
	// Stdin, Stdout and Stderr are the command's streams; nil: /dev/null.
	Stdin, Stdout, Stderr *os.File
	// Offline gives the sandbox its own network namespace with loopback only.
	Offline bool
	// HostPorts (agentbox exec --host-port; needs Offline): 127.0.0.1:Inside in the
	// sandbox reaches the host's 127.0.0.1:Host, each connection relayed by the
	// calling process; nothing else of the host's loopback is reachable.
	HostPorts []PortMap
	// Publish (agentbox exec --publish; needs Offline): the calling process listens
	// on the host's 127.0.0.1:Host while the command runs and relays each connection
	// to 127.0.0.1:Inside in the sandbox. A host port in use fails Run before the
	// command starts.
	Publish []PortMap
	// SSHAgent (agentbox exec --ssh-agent) serves the command a filtered SSH agent
	// (SSH_AUTH_SOCK inside) that forwards to the agent at SSHAuthSock (empty:
	// $SSH_AUTH_SOCK) but lists and signs with only the SSHKeys (a comment, a
	// fingerprint SHA256:… or a public key file; none: every key), refuses adding,
	// removing and locking keys, and records each request in the session record.
	// SSHKeys imply SSHAgent.
	SSHAgent    bool
	SSHKeys     []string
	SSHAuthSock string
	// InitBinary is an agentbox binary of the same version, re-executed as the init.
	// Empty: the running program, which must have called Init first in main. It
	// is executed by its path at each launch, before anything protects the host:
	// an absolute path outside the repository and any Git working tree, or Run
	// refuses it (a session there could replace it for the next launch).
	InitBinary string
	// DiskTmp makes the sandbox's /tmp a fresh mode-0700 directory below the user's
	// cache dir, removed when Run returns (P10; agentbox exec --disk-tmp).
	DiskTmp bool
	// NestedSandbox lets the command mount, for a sandbox of its own (agentbox exec
	// --nested-sandbox): on Linux 7.1+ the host's path sockets are then masked where
	// found at launch instead of denied by Landlock, and those bound later stay
	// reachable. Before 7.1 it changes nothing.
	NestedSandbox bool
	// Memory, Pids and CPUs bound the session's processes together, as agentbox
	// exec's --memory SIZE, --pids N and --cpus N read them ("2G", "512", "0.5");
	// empty: no limit. Where the host's cgroup v2 tree does not delegate the
	// controller to the user, Run and a Launcher's Run refuse (a *leafcg.LimitError's
	// words).
	Memory, Pids, CPUs string
	// TmpSize is the budget in bytes of the RAM-backed filesystems (/tmp, /run,
	// /dev/shm, the HOME overlay's upper layer; agentbox exec --tmp-size), the
	// files' kernel memory included (a quarter of it, mounts.BudgetSplit): a write
	// past it gets ENOSPC inside. 0: the default, a quarter of RAM, at most 4 GiB.
	TmpSize int64
	// GPU hands in the host's GPU device nodes (agentbox exec --gpu); Devices the
	// host character devices at these paths (--device). Either is refused when
	// there is no such node, or it is not a character device of a class the
	// device rule hands in (docs/security.md, "Devices").
	GPU     bool
	Devices []string
	// Log receives agentbox's own lines (audit findings, warnings), as agentbox exec
	// prints them on its stderr; nil: os.Stderr.
	Log io.Writer

	// NoAudit turns off the post-session audit (agentbox has no flag for it). What it
	// gives up: the repository's .git and working tree stay writable inside, so a
	// session can still redirect the operator's Git (a new .git/commondir, a planted
	// submodule gitdir whose config sets core.fsmonitor) though it cannot write the
	// protected paths themselves; without the audit nothing finds and quarantines
	// that after the session, and the operator's next git command in the repository
	// may run what the session planted, on the host. Only for a caller that audits
	// the repository itself or discards it after the session. The baseline and its
	// pending journal are kept all the same (docs/api.md): a session beside this one
	// inherits it, and a killed launcher's session is audited by the next launch.
	NoAudit bool
	// NoGitSave: no metadata snapshot before launch (P8; --no-git-save). What a
	// session does to .git can then not be undone from a snapshot.
	NoGitSave bool
	// AllowGitPush: no push guard (P9; --allow-git-push): git push works inside.
	AllowGitPush bool
	// NoRecord: no shadow record of the session (--no-record): agentbox log, show,
	// diff and undo do not see it.
	NoRecord bool
}

// PortMap is one forwarding of HostPorts or Publish: 127.0.0.1:Inside in the
// sandbox, 127.0.0.1:Host on the host.
type PortMap = policy.PortMap

// Phase is one measured step of a launch (nsinit's timings).
type Phase = backend.Phase

// Result is how the command ended.
type Result struct {
	// Status is the command's exit status, or 128+N when signal N killed it.
	Status int
	// Phases are the setup timings: clone and id maps, each mount, dropping
	// privileges, the exec of the command.
	Phases []Phase
	// Prestarted: the launch used an init started ahead of it (Prestart).
	Prestarted bool
	// InitPeakRSSKiB is the init's own peak resident set in KiB (0: not reported).
	InitPeakRSSKiB int64
	// AuditFindings are the post-session audit's findings, one line each (also
	// written to Options.Log): what the session planted that would make the
	// operator's Git run a program, each already moved aside into the quarantine.
	AuditFindings []string
	// Snapshot is the metadata snapshot taken before the launch ("" when none).
	Snapshot string
}

// SetupError is a failure before the command started; Step names what failed.
type SetupError = nsinit.SetupError

// initCalled records that the running program decides its role in main (Init), so
// it may be re-executed as the init.
var initCalled atomic.Bool

// ErrNoInit is returned by Run when Options.InitBinary is empty and the program never
// called Init: re-executing it would run its own main inside the sandbox.
var ErrNoInit = errors.New("sandbox: call sandbox.Init first in main, or set Options.InitBinary to an agentbox binary")

// Init decides this process's role and must be the first statement of main in a
// program that launches sandboxes without Options.InitBinary. In the re-executed
// init (or launcher helper, see NewLauncher) it does that role's work and never
// returns; in the program itself it returns at once, having only read an environment
// variable.
func Init() {
	if nsinit.IsInit() {
		nsinit.Main()
	}
	if isLauncher() {
		os.Exit(serveLauncher())
	}
	initCalled.Store(true)
}

// Plan returns the mount plan Run would execute for opts, as `agentbox exec
// --dry-run --json` prints it for the same options: made by the same preparation
// step, writing nothing on the host (Run then creates the missing placeholders,
// stages the push guard and the --disk-tmp directory, and adds the identities it
// rechecked). It is exported for tools that show or compare plans.
func Plan(opts Options) (mounts.Plan, error) {
	cfg, err := config(opts)
	if err != nil {
		return mounts.Plan{}, oneLineError(err)
	}
	defer closeInit(cfg)
	plan, err := session.Plan(cfg)
	return plan, oneLineError(err)
}

// config is the session configuration of opts: the policy of agentbox exec with the
// same choices, and the Go API's side of the launch.
func config(opts Options) (session.Config, error) {
	if len(opts.Command) == 0 {
		return session.Config{}, errors.New("sandbox: no command")
	}
	dir := opts.Dir
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return session.Config{}, fmt.Errorf("sandbox: working directory: %w", err)
		}
		dir = wd
	}
	home := opts.Home
	if home == "" {
		home = os.Getenv("HOME")
	}
	if opts.TmpSize < 0 {
		return session.Config{}, fmt.Errorf("sandbox: TmpSize %d is negative (0: the default)", opts.TmpSize)
	}
	tmpSize := ""
	if opts.TmpSize > 0 {
		tmpSize = strconv.FormatInt(opts.TmpSize, 10)
	}
	sock := opts.SSHAuthSock
	if sock == "" {
		sock = os.Getenv("SSH_AUTH_SOCK")
	}
	p, err := policy.New(policy.Options{
		HostPort:      portStrings(opts.HostPorts),
		Publish:       portStrings(opts.Publish),
		SSHAgent:      opts.SSHAgent,
		SSHKey:        opts.SSHKeys,
		SSHAuthSock:   sock,
		Repo:          opts.Repo,
		Cwd:           dir,
		Home:          home,
		Offline:       opts.Offline,
		DiskTmp:       opts.DiskTmp,
		NestedSandbox: opts.NestedSandbox,
		TmpSize:       tmpSize,
		GPU:           opts.GPU,
		Devices:       opts.Devices,
		Backend:       policy.BackendNative,
		XDGCacheHome:  operatorCacheHome(),
		XDGStateHome:  operatorStateHome(),
		XDGConfigHome: operatorConfigHome(),
		Command:       opts.Command,
		UnsetEnv:      opts.UnsetEnv,
		ClearEnv:      opts.ClearEnv,
		Memory:        opts.Memory,
		Pids:          opts.Pids,
		CPUs:          opts.CPUs,
	})
	if err != nil {
		return session.Config{}, fmt.Errorf("sandbox: %w", err)
	}
	initFile, err := openInitBinary(opts.InitBinary, append([]string{p.Repo}, p.AddDirs...)...)
	if err != nil {
		return session.Config{}, err
	}
	// The credential variables only: the Go API hides no files.
	p.Env.Secrets = opts.SecretEnv
	log := opts.Log
	if log == nil {
		log = os.Stderr
	}
	// agentbox's lines name paths the sandboxed command chose: escaped, as the
	// CLI's are, before they reach the caller's terminal (P12).
	log = termsafe.NewWriter(log)
	return session.Config{
		Policy: p, Args: opts.Command, Version: version(), Stdout: log, Stderr: log,
		GitSave:      record.GitSaveConfig{Disabled: opts.NoGitSave, Keep: snapshot.DefaultKeep, KeepSize: record.DefaultKeepSize},
		AllowGitPush: opts.AllowGitPush, NoRecord: opts.NoRecord, NoAudit: opts.NoAudit,
		Stdio: &backend.Stdio{Stdin: opts.Stdin, Stdout: opts.Stdout, Stderr: opts.Stderr},
		Env:   opts.Env, InitBinary: opts.InitBinary, InitFile: initFile, KeepGC: true,
	}, nil
}

// operatorStateHome is where agentbox keeps the operator's state (pending-audit
// journals and their locks, records, snapshots, the grant ledger): the directory
// every other launch takes from XDG_STATE_HOME, else $HOME — the CLI's, `agentbox
// audit`'s and other Go API sessions' — even when Options.Home gives the command a
// HOME of its own. Placed below that HOME, a session's journal was one no launch
// beside it saw: that launch took this session's plants for the user's own in its
// baseline, and a killed launcher's session was left for launches that never look
// there. With neither variable set there is no such place, and the state follows
// Options.Home as before.
func operatorStateHome() string {
	if dir := grantledger.StateDirFromEnv(); dir != "" {
		return filepath.Dir(dir)
	}
	return os.Getenv("XDG_STATE_HOME")
}

// operatorCacheHome is where agentbox keeps the operator's cache (--disk-tmp's
// directories, the push guard's copies, the empty sources of hidden paths):
// ${XDG_CACHE_HOME:-$HOME/.cache} of this process's environment, whatever
// Options.Home says, so that what a killed Go API program leaves there is what
// `agentbox gc` collects (it looks only there). Below Options.Home, a DiskTmp
// session's directory outlived its program for good. With neither variable set,
// it follows Options.Home as before.
func operatorCacheHome() string { return operatorXDGHome("XDG_CACHE_HOME", ".cache") }

// operatorConfigHome is where the operator's agentbox exec reads its config
// (${XDG_CONFIG_HOME:-$HOME/.config} of this process's environment), whatever
// Options.Home says, so that a repository holding it is refused here as there
// (policy's checkConfigNotWritable): a session could otherwise write the config
// that widens the operator's next agentbox exec.
func operatorConfigHome() string { return operatorXDGHome("XDG_CONFIG_HOME", ".config") }

// operatorXDGHome is the XDG base directory named by variable in this process's
// environment when it is absolute, else $HOME/underHome; "" with neither.
func operatorXDGHome(variable, underHome string) string {
	if dir := os.Getenv(variable); filepath.IsAbs(dir) {
		return dir
	}
	if home := os.Getenv("HOME"); filepath.IsAbs(home) {
		return filepath.Join(home, underHome)
	}
	return ""
}

// portStrings spells forwardings as agentbox exec takes them, for the one parser.
func portStrings(ms []PortMap) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.String())
	}
	return out
}

// Run starts opts.Command in a new sandbox and waits for it to end, then audits the
// repository (unless Options.NoAudit). An error means the command never started (a
// *SetupError names the failed step); otherwise Result.Status is the command's exit
// status.
//
// While Run waits, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 and SIGWINCH
// sent to the calling process are forwarded to the command instead of taking their
// default action.
//
// Run starts the init from the calling process: with vfork on amd64; elsewhere with
// a full fork that copies the caller's page tables, so that a program with a large
// heap launches through a Launcher instead.
func Run(opts Options) (Result, error) {
	if opts.InitBinary == "" && !initCalled.Load() {
		return Result{}, ErrNoInit
	}
	defer refillSpare()
	return run(opts, spareDriver{})
}

// run runs one session of opts through the session core, the plan run by driver.
func run(opts Options, driver backend.Driver) (Result, error) {
	cfg, err := config(opts)
	if err != nil {
		return Result{}, oneLineError(err)
	}
	defer closeInit(cfg)
	cfg.Driver = driver
	out, err := session.RunSession(cfg)
	return Result{Status: out.Status, Phases: out.Phases, Prestarted: out.Prestarted, InitPeakRSSKiB: out.InitPeakRSSKiB,
		AuditFindings: out.AuditFindings, Snapshot: out.Snapshot}, oneLineError(err)
}

// closeInit closes the init binary config opened.
func closeInit(cfg session.Config) {
	if cfg.InitFile != nil {
		cfg.InitFile.Close()
	}
}

// spareDriver runs a plan in the native backend, on the init Prestart started ahead
// when it fits the plan.
type spareDriver struct{}

// Run implements backend.Driver. A spare that died while it waited (the plan could
// not be handed over: nothing of the command ran) is replaced by a fresh init; the
// session's BeforeExec, which only waits for host work started once, may run again.
func (spareDriver) Run(plan mounts.Plan, o backend.Options) (backend.Result, error) {
	grantedToSessions(plan.Writable())
	spare := takeSpare(plan, o.InitBinary)
	res, err := nsinit.Native{Spare: spare}.Run(plan, o)
	var se *SetupError
	if spare != nil && errors.As(err, &se) && se.Step == nsinit.StepHandPlan {
		return nsinit.Run(plan, o)
	}
	return res, err
}
