package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"

	"github.com/agentbox/agentbox/config"
	"github.com/agentbox/agentbox/internal/cli"
	"github.com/agentbox/agentbox/internal/kernel"

	"github.com/agentbox/agentbox/internal/termsafe"
	"github.com/agentbox/agentbox/nsinit"
	"github.com/agentbox/agentbox/policy"
	"github.com/agentbox/agentbox/session"
)

var execCommand = cli.Command{
	Name:    "exec",
	Args:    "[--] [COMMAND [ARG...]]",
	Summary: "run COMMAND (default $SHELL) sandboxed",
	Help: `Runs COMMAND (default $SHELL, else /bin/bash) in the sandbox. Exit status: the
command's; 128+N when it was killed by signal N (on a terminal agentbox then ends
by that signal itself, so that your shell sees the interrupt); 125 when agentbox
failed before the command started.`,
	Flags: func() *flag.FlagSet { return new(execArgs).flags() },
}

// execArgs holds what exec's flags set.
type execArgs struct {
	opts           policy.Options
	cfg            session.Config
	dryRun, asJSON bool
	profile        string
}

func (a *execArgs) flags() *flag.FlagSet {
	fs := flag.NewFlagSet("exec", flag.ContinueOnError)
	fs.BoolVar(&a.dryRun, "dry-run", false, "do every check, print the mount plan and exit without launching")
	fs.BoolVar(&a.asJSON, "json", false, "with --dry-run: print the plan as JSON")
	fs.StringVar(&a.opts.Repo, "repo", "", "the one writable `DIR` (default: Git top level of the current directory, else the current directory)")
	fs.BoolVar(&a.opts.Offline, "offline", false, "new network namespace: loopback only")
	fs.Var(cli.NewList(&a.opts.AllowNet), "allow-net", "new network namespace whose only way out is agentbox's proxy, to `HOST[:PORT]` (*.DOMAIN, an address or CIDR prefix, or a preset: @claude, @codex, @npm, @github, …; repeatable)")
	fs.BoolVar(&a.opts.NestedSandbox, "nested-sandbox", false, "let the command mount, for an agent's own sandbox (Claude Code's, srt's or Codex's bubblewrap, unshare -m): on Linux 7.1+ the host's path sockets are then masked where found at launch instead of denied by Landlock, and those bound later stay reachable; before 7.1 it changes nothing (docs/security.md)")
	fs.BoolVar(&a.opts.DiskTmp, "disk-tmp", false, "sandbox /tmp is a fresh directory below the cache dir, removed on exit")
	fs.Var(tmpSizeValue{&a.opts.TmpSize}, "tmp-size", "the RAM-backed filesystems (/tmp, /run, /dev/shm, HOME's overlay) hold at most `SIZE` together (suffix K, M, G, T; default a quarter of RAM, at most 4G)")
	fs.Var(limitValue{&a.opts.Memory, func(s string) error { _, err := policy.MemoryLimit(s, policy.TotalRAM()); return err }}, "memory", "the session's processes together use at most `SIZE` of memory (suffix K, M, G, T; no swap), in a cgroup of its own; refused where the host's cgroup v2 tree does not delegate the memory controller to you")
	fs.Var(limitValue{&a.opts.Pids, func(s string) error { _, err := policy.PidsLimit(s, policy.PidMax()); return err }}, "pids", "the session runs at most `N` processes and threads at once (a fork bomb stops there), in a cgroup of its own; refused without the pids controller")
	fs.Var(limitValue{&a.opts.CPUs, func(s string) error { _, err := policy.CPULimit(s, runtime.NumCPU()); return err }}, "cpus", "the session gets at most `N` CPUs' time (0.5: half of one), in a cgroup of its own; refused without the cpu controller")
	fs.BoolVar(&a.opts.GPU, "gpu", false, "hand in the host's GPU device nodes (/dev/nvidia*, /dev/nvidia-caps/*, /dev/dri/card* and renderD*, /dev/kfd): the driver is reachable from inside (docs/security.md)")
	fs.Var(cli.NewList(&a.opts.Devices), "device", "hand the host character device `PATH` (below /dev) in at its own path (repeatable): GPUs, sound, video, USB serial adapters and KVM only, judged by device number (docs/security.md)")
	fs.StringVar(&a.opts.Backend, "backend", "native", "the backend `NAME`: native, bwrap or auto")
	fs.StringVar(&a.profile, "profile", "", "apply the config file's [profile.`NAME`] over its defaults")
	registerKeepFlags(fs, &a.opts)
	registerSSHAgentFlags(fs, &a.opts)
	registerPortFlags(fs, &a.opts)
	registerSessionFlags(fs, &a.cfg)
	return fs
}

func cmdExec(args []string) int {
	// The command line alone first: help, bad flags, the profile it names, and
	// which flags it sets (they win over the user's config file).
	var cl execArgs
	clFlags := cl.flags()
	if st, done := parseFlags(clFlags, execCommand, args); done {
		return st
	}
	if os.Getenv("AGENTBOX") == "1" {
		// Inside a session HOME is already an overlay, which overlayfs cannot
		// stack on in a user namespace; and this launcher would take the outer
		// session's pending audit for a dead one.
		return fail("exec: already inside an agentbox sandbox (AGENTBOX=1 is set): sandboxes do not nest; run the command directly")
	}
	a, fs, prov, err := layered(args, clFlags, cl.profile)
	if err != nil {
		return fail("%v", err)
	}
	opts, cfg, dryRun, asJSON := &a.opts, &a.cfg, &a.dryRun, &a.asJSON
	if *asJSON && !*dryRun {
		return fail("exec: --json goes with --dry-run")
	}
	if !*dryRun && opts.Backend == policy.BackendNative {
		// The signals the launch forwards are registered before the policy is read
		// and the plan prepared (where os/signal registers them, that takes a
		// while). Not stopped: after the launch they act as if uncaught, and the
		// process exits.
		cfg.Signals = nsinit.CatchSignals()
	}
	cwd, err := os.Getwd()
	if err != nil {
		return fail("exec: working directory: %v", err)
	}
	opts.Cwd = cwd
	opts.Home = os.Getenv("HOME")
	opts.Shell = os.Getenv("SHELL")
	opts.XDGCacheHome = os.Getenv("XDG_CACHE_HOME")
	opts.XDGStateHome = os.Getenv("XDG_STATE_HOME")
	opts.XDGConfigHome = os.Getenv("XDG_CONFIG_HOME")
	opts.Environ = os.Environ()
	opts.SSHAuthSock = os.Getenv("SSH_AUTH_SOCK")
	opts.Command = fs.Args()
	if msg, ok := missingRepoFirst(opts.Command); ok {
		return fail("%s", msg)
	}
	if dir, rest, ok := repoFirst(opts.Command); ok {
		// agent-box's habit, "agentbox exec DIR -- CMD": DIR is the repository.
		if opts.Repo != "" {
			return fail("exec: both --repo %s and %s before --: pass the repository once", opts.Repo, dir)
		}
		opts.Repo, opts.Command = dir, rest
	}

	// Two settings that contradict, not both typed: the narrower wins (repofile.go).
	notes := narrowerWins(opts, prov)
	pol, err := policy.New(*opts)
	if err != nil {
		return fail("%v", err)
	}
	// The repository's own file may only narrow what the user chose; it is read
	// from the repository the policy settled on, and the policy made again.
	pol, more, err := applyRepoFile(a, fs, prov, pol)
	if err != nil {
		return fail("%v", err)
	}
	notes = append(notes, more...)
	if n := nestedSandboxNote(pol, prov, kernel.CanDenyPathSockets()); n != "" {
		notes = append(notes, n)
	}
	if n := noGitNote(opts, pol); n != "" {
		notes = append(notes, n)
	}
	cfg.Policy = pol
	cfg.Args = args
	cfg.Version = Version
	// agentbox's own messages name repository paths and audit findings: nothing in
	// them reaches the terminal as a command. The command's own output does not go
	// through these.
	stderr := termsafe.NewWriter(os.Stderr)
	defer stderr.Flush()
	cfg.Stdout, cfg.Stderr = termsafe.NewWriter(os.Stdout), stderr
	if *asJSON {
		// For programs, and still nothing a terminal acts on: the plan names paths
		// of the repository, which a session chose.
		jsonOut := termsafe.NewJSONWriter(os.Stdout)
		defer jsonOut.Flush()
		cfg.Stdout = jsonOut
	}
	cfg.Notes = notes // shown once nothing can refuse the launch any more
	if *dryRun {
		cfg.DryRun = session.DryRunText
		if *asJSON {
			cfg.DryRun = session.DryRunJSON
		}
	}
	ex, err := session.Run(*cfg)
	if err != nil {
		return fail("%v", err)
	}
	if *dryRun {
		// On stderr, once the plan is out: stdout stays the plan alone (with
		// --backend bwrap, the exact bwrap command line, to copy or to script), and
		// a refused dry run stays one line.
		printSettings(os.Stderr, fs, prov)
		printNotes(os.Stderr, notes)
	}
	if ex.Signal != 0 {
		// A terminal session whose command was killed by a signal: end by it too,
		// now that everything is done (session.Exit). Returns only if it could not.
		nsinit.EndBySignal(ex.Signal)
	}
	return ex.Status
}

// repoFirst recognises "DIR -- CMD...": a first argument that is a directory, followed
// by "--". A command is never a directory, so this cannot shadow a real command line.
func repoFirst(args []string) (dir string, rest []string, ok bool) {
	if len(args) < 2 || args[1] != "--" {
		return "", nil, false
	}
	if fi, err := os.Stat(args[0]); err != nil || !fi.IsDir() {
		return "", nil, false
	}
	return args[0], args[2:], true
}

// userConfig is the user's config file: ${XDG_CONFIG_HOME:-$HOME/.config}/agentbox/config.toml.
func userConfig() string {
	if x := os.Getenv("XDG_CONFIG_HOME"); filepath.IsAbs(x) {
		return filepath.Join(x, "agentbox", "config.toml")
	}
	if h := os.Getenv("HOME"); filepath.IsAbs(h) {
		return filepath.Join(h, ".config", "agentbox", "config.toml")
	}
	return ""
}

// layered returns exec's flags with the user's config file laid under the command
// line: the file's top level, then its profile (the one --profile names, else its
// own default), then args. prov says where each flag set by a file or args came from.
func layered(args []string, cmdline *flag.FlagSet, profile string) (*execArgs, *flag.FlagSet, map[string]string, error) {
	prov := map[string]string{}
	a := new(execArgs)
	fs := a.flags()
	if path := userConfig(); path != "" {
		f, err := config.ReadUser(path)
		if err != nil {
			return nil, nil, nil, err
		}
		if f != nil {
			// A file another user could write sets the operator's policy.
			if err := policy.CheckPrivate("config file", path, os.Geteuid()); err != nil {
				return nil, nil, nil, err
			}
		}
		if err := f.Check(func() *flag.FlagSet { return new(execArgs).flags() }); err != nil {
			return nil, nil, nil, err
		}
		settings, err := f.Selected(profile)
		if err != nil {
			return nil, nil, nil, err
		}
		if err := config.Apply(fs, settings, prov); err != nil {
			return nil, nil, nil, err
		}
	} else if profile != "" {
		return nil, nil, nil, fmt.Errorf("--profile %s: no config file ($HOME is unset)", profile)
	}
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil { // parsed once already: cannot fail
		return nil, nil, nil, err
	}
	cmdline.Visit(func(f *flag.Flag) { prov[f.Name] = "command line" })
	return a, fs, prov, nil
}

// printNotes says on stderr what settled a contradiction or what the repository's
// file narrowed, one line each.
func printNotes(w io.Writer, notes []string) {
	for _, n := range notes {
		fmt.Fprintf(w, "agentbox: %s\n", termsafe.String(n))
	}
}

// printSettings shows, for --dry-run, every exec setting that is not its default
// and where it came from.
func printSettings(w io.Writer, fs *flag.FlagSet, prov map[string]string) {
	for _, f := range cli.Visible(fs) {
		src, ok := prov[f.Name]
		if !ok {
			continue
		}
		fmt.Fprintf(w, "setting  %s = %s  # %s\n", f.Name, termsafe.String(f.Value.String()), termsafe.String(src))
	}
	fmt.Fprintf(w, "setting  (every other flag: its default)\n")
}

// tmpSizeValue is --tmp-size: checked when set, so that a bad value in a config file
// is reported with its file and line.
type tmpSizeValue struct{ s *string }

func (v tmpSizeValue) String() string {
	if v.s == nil {
		return ""
	}
	return *v.s
}

func (v tmpSizeValue) Set(s string) error {
	if _, err := policy.TmpSize(s, policy.TotalRAM()); err != nil {
		return err
	}
	*v.s = s
	return nil
}

// limitValue is --memory, --pids or --cpus: checked when set, so that a bad value in
// a config file is reported with its file and line; empty is no limit.
type limitValue struct {
	s     *string
	check func(string) error
}

func (v limitValue) String() string {
	if v.s == nil {
		return ""
	}
	return *v.s
}

func (v limitValue) Set(s string) error {
	if err := v.check(s); err != nil {
		return err
	}
	*v.s = s
	return nil
}
