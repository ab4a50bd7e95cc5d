// Package sandbox is agentbox's Go API: a Go program calls Run to start one command
// in the native sandbox, without the agentbox CLI in between.
//
// What Run builds is the sandbox policy of `agentbox exec --backend native`: host
// read-only (P1), one writable repository (P2), HOME a disposable overlay (P3), private
// /tmp and /run (P4), new namespaces (P5, with the network namespace when Offline),
// the Git exec surface read-only (P7). The CLI's session extras are not part of it:
// no metadata snapshot (P8), no push guard (P9), no post-session audit, no shadow
// record, no --disk-tmp. A program that wants those runs `agentbox exec`.
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
	"os"
	"sync/atomic"
	"time"

	"github.com/agentbox/agentbox/gitguard"
	"github.com/agentbox/agentbox/internal/kernel"
	"github.com/agentbox/agentbox/internal/leafcg"
	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/nsinit"
	"github.com/agentbox/agentbox/policy"
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
	// InitBinary is an agentbox binary of the same version, re-executed as the init.
	// Empty: the running program, which must have called Init first in main.
	InitBinary string
}

// Phase is one measured step of a launch (nsinit's timings).
type Phase = nsinit.Phase

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

// Plan builds the mount plan Run would execute for opts, creating the read-only
// placeholders for missing protected Git paths (as agentbox exec does). It is
// exported for tools that show or compare plans.
func Plan(opts Options) (mounts.Plan, error) {
	if len(opts.Command) == 0 {
		return mounts.Plan{}, errors.New("sandbox: no command")
	}
	dir := opts.Dir
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return mounts.Plan{}, fmt.Errorf("sandbox: working directory: %w", err)
		}
		dir = wd
	}
	home := opts.Home
	if home == "" {
		home = os.Getenv("HOME")
	}
	p, err := policy.New(policy.Options{
		Repo:          opts.Repo,
		Cwd:           dir,
		Home:          home,
		Offline:       opts.Offline,
		Backend:       policy.BackendNative,
		XDGCacheHome:  os.Getenv("XDG_CACHE_HOME"),
		XDGStateHome:  os.Getenv("XDG_STATE_HOME"),
		XDGConfigHome: os.Getenv("XDG_CONFIG_HOME"),
		Command:       opts.Command,
		UnsetEnv:      opts.UnsetEnv,
	})
	if err != nil {
		return mounts.Plan{}, fmt.Errorf("sandbox: %w", err)
	}
	protected, err := gitguard.ProtectedPaths(p.Repo)
	if err != nil {
		return mounts.Plan{}, fmt.Errorf("sandbox: protect Git paths: %w", err)
	}
	if err := gitguard.EnsurePlaceholders(protected); err != nil {
		return mounts.Plan{}, fmt.Errorf("sandbox: %w", err)
	}
	return mounts.Build(p, mounts.Session{Protected: protected, HostRoot: mounts.IsHostRoot(), ScopeAbstractUnix: kernel.CanScopeAbstractUnix(), MaskSockets: kernel.HostSockets(p)}), nil
}

// Run starts opts.Command in a new sandbox and waits for it to end. An error means
// the command never started (a *SetupError names the failed step); otherwise
// Result.Status is the command's exit status.
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
	plan, err := Plan(opts)
	if err != nil {
		return Result{}, err
	}
	return run(plan, opts)
}

func run(plan mounts.Plan, opts Options) (Result, error) {
	nopts := nsinit.Options{
		Stdio:      nsinit.Stdio{Stdin: opts.Stdin, Stdout: opts.Stdout, Stderr: opts.Stderr},
		Env:        opts.Env,
		InitBinary: opts.InitBinary,
	}
	nopts.Env = commandEnv(opts)
	// The session's own cgroup (P12): nothing inside reaches the caller's.
	leaf, err := leafcg.Prepare(fmt.Sprintf("agentbox-%d-%d", os.Getpid(), time.Now().UnixNano()))
	if err != nil {
		return Result{}, fmt.Errorf("sandbox: %w", err)
	}
	if leaf != nil {
		nopts.AfterStart = leaf.Place
		defer leaf.Remove()
	}
	res, err := nsinit.Native{Spare: takeSpare(plan, nopts.InitBinary)}.Run(plan, nopts)
	refillSpare()
	return Result{Status: res.Status, Phases: res.Phases, Prestarted: res.Prestarted, InitPeakRSSKiB: res.InitPeakRSSKiB}, err
}

// commandEnv is the command's environment: Env (nil: the caller's) less what
// UnsetEnv, ClearEnv and SecretEnv drop.
func commandEnv(opts Options) []string {
	rules := policy.EnvRules{Unset: opts.UnsetEnv, Clear: opts.ClearEnv, Secrets: opts.SecretEnv}
	if !rules.Clear && !rules.Secrets && len(rules.Unset) == 0 {
		return opts.Env
	}
	env := opts.Env
	if env == nil {
		env = os.Environ()
	}
	return rules.Apply(env)
}
