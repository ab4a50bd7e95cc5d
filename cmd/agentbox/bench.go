package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/agentbox/agentbox/bench"
	"github.com/agentbox/agentbox/bwrapcheck"
	"github.com/agentbox/agentbox/internal/cli"
	"github.com/agentbox/agentbox/internal/hostpath"
	"github.com/agentbox/agentbox/policy"
	"github.com/agentbox/agentbox/sandbox"
	"github.com/agentbox/agentbox/shadow"
)

var benchCommand = cli.Command{
	Name:    "bench",
	Args:    "[-- COMMAND [ARG...]]",
	Summary: "measure launches: native vs bwrap vs floors",
	Help: `Measures the launch of COMMAND (default: true) under the same sandbox policy,
interleaved round by round: agentbox exec --backend native, agentbox exec --backend
bwrap, two bubblewrap baselines (bwrap-plain: the policy as a user writes it by hand;
bwrap-agentbox-plan: agentbox's whole plan, the argv 'agentbox exec --dry-run --backend
bwrap' prints, without agentbox's init inside), agentbox's Go API (latency, and
throughput in bursts), and two floors (fork/exec of the command, an empty Go binary). The launch variants run with --no-git-save --no-record; native-defaults
shows what the snapshot, the record and the audit add. Where the host enforces
--pids/--cpus (and --memory), native-limits and native-memory show what the session's
limited cgroup adds. With --against BINARY, another
agentbox build runs native and native-defaults in the same rounds, for a before/after
comparison that one machine's changing load cannot skew. The result is stored in the
results store (agentbox log --results) unless --no-store.`,
	Flags: func() *flag.FlagSet { return new(benchArgs).flags() },
}

// benchArgs holds what bench's flags set.
type benchArgs struct {
	cfg                                 bench.Config
	asJSON, noStore, serveAPI, prestart bool
	svg, bwrap                          string
	scale                               bool
	scaleCfg                            bench.ScaleConfig
	repos                               string
}

func (a *benchArgs) flags() *flag.FlagSet {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.BoolVar(&a.asJSON, "json", false, "print the result as JSON")
	fs.StringVar(&a.svg, "svg", "", "draw the wall-time distributions to `FILE` (SVG)")
	fs.BoolVar(&a.noStore, "no-store", false, "do not store the result in the results store")
	fs.StringVar(&a.bwrap, "bwrap", "", "bubblewrap >= 0.12.0 to compare with (`PATH`; default: $AGENTBOX_BWRAP, else PATH)")
	fs.BoolVar(&a.serveAPI, "serve-api", false, "internal: be the Go API variant's probe")
	fs.BoolVar(&a.prestart, "prestart", false, "internal: with --serve-api, use sandbox.Prestart")
	fs.IntVar(&a.cfg.Runs, "runs", 100, "measured rounds, `N` (one launch of each variant per round)")
	fs.IntVar(&a.cfg.Warmup, "warmup", 5, "`N` rounds run first and discarded")
	fs.StringVar(&a.cfg.Against, "against", "", "also measure another agentbox `BINARY` (e.g. the last release) in the same rounds: native and native-defaults of both, and their ratios (with --scale: its default and changed-ten sessions, on a copy of each repository)")
	fs.StringVar(&a.cfg.Repo, "repo", "", "the writable repository `DIR` (default: a fresh Git repository in /tmp, removed after)")
	fs.BoolVar(&a.scale, "scale", false, "run the scaling scenario instead: generated repositories of growing size (see --scale-repos)")
	fs.StringVar(&a.repos, "scale-repos", "20,20000:300M,100000:1.5G", "with --scale: repository shapes `FILES[:PACK],...` (generated once into the cache)")
	fs.IntVar(&a.scaleCfg.Sessions, "scale-sessions", 20, "with --scale: `N` unchanged sessions whose snapshots' disk is measured")
	fs.IntVar(&a.scaleCfg.First, "scale-first", 3, "with --scale: `N` first sessions (each from an empty state) measured")
	return fs
}

func cmdBench(args []string) int {
	var a benchArgs
	fs := a.flags()
	if st, done := parseFlags(fs, benchCommand, args); done {
		return st
	}
	scale, scaleCfg, repos := &a.scale, a.scaleCfg, &a.repos
	cfg, asJSON, svg, noStore, bwrap, serveAPI, prestart := &a.cfg, &a.asJSON, &a.svg, &a.noStore, &a.bwrap, &a.serveAPI, &a.prestart
	cfg.Command = fs.Args()
	if len(cfg.Command) == 0 {
		cfg.Command = []string{"true"}
	}
	if *serveAPI {
		return serveBenchAPI(*cfg, *prestart)
	}
	if *scale {
		return runScale(scaleCfg, *cfg, *repos)
	}

	self, err := os.Executable()
	if err != nil {
		return fail("bench: find the agentbox binary: %v", err)
	}
	cfg.Agentbox = self
	cfg.Version = Version
	if cfg.Against != "" {
		if fi, err := os.Stat(cfg.Against); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			return fail("bench: --against %s: not an executable file; give the path of another agentbox binary", cfg.Against)
		}
	}
	if *bwrap != "" {
		os.Setenv(bwrapcheck.EnvVar, *bwrap)
	}
	if bin, err := bwrapcheck.Lookup(defaultRepo(), cfg.Repo); err == nil {
		bin.Close()
		cfg.Bwrap = bin.Path
	} else {
		cfg.NoBwrap = err.Error() // a note of the report: a refusal below stays one line
	}
	if g, err := hostpath.LookPath("go", defaultRepo(), cfg.Repo); err == nil {
		cfg.GoTool = g
	}
	cfg.CacheDir = policy.CacheDirFor(os.Getenv("XDG_CACHE_HOME"), os.Getenv("HOME"))
	if isTerminal(os.Stderr) {
		cfg.Progress = os.Stderr
	}

	rep, err := bench.Run(*cfg)
	if err != nil {
		return fail("%v", err)
	}
	doc, err := rep.JSON()
	if err != nil {
		return fail("bench: encode result: %v", err)
	}
	if *svg != "" {
		var b bytes.Buffer
		if err := rep.WriteSVG(&b); err != nil {
			return fail("%v", err)
		}
		if err := os.WriteFile(*svg, b.Bytes(), 0o644); err != nil {
			return fail("bench: --svg: %v", err)
		}
	}
	if *asJSON {
		writeJSON(os.Stdout, append(doc, '\n'))
	} else {
		rep.WriteText(os.Stdout)
	}
	if !*noStore {
		state, err := stateDir()
		if err == nil {
			var id string
			if id, err = shadow.StoreResult(state, "bench", doc); err == nil && !*asJSON {
				fmt.Printf("\nstored as result %s (agentbox log --results)\n", id)
			}
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "agentbox: bench: result not stored: %v\n", err)
		}
	}
	return 0
}

// serveBenchAPI is the Go API variant's probe: it runs in the current directory
// with --repo and COMMAND, answering the harness on stdin/stdout.
func serveBenchAPI(cfg bench.Config, prestart bool) int {
	err := bench.ServeAPI(os.Stdin, os.Stdout, sandbox.Options{Repo: cfg.Repo, Command: cfg.Command}, prestart)
	if err != nil {
		return fail("bench: Go API probe: %v", err)
	}
	return 0
}

// runScale is `agentbox bench --scale`: the scaling scenario, printed as Markdown.
func runScale(sc bench.ScaleConfig, cfg bench.Config, repos string) int {
	self, err := os.Executable()
	if err != nil {
		return fail("bench: find the agentbox binary: %v", err)
	}
	sc.Agentbox = self
	if cfg.Against != "" {
		if fi, err := os.Stat(cfg.Against); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			return fail("bench: --against %s: not an executable file; give the path of another agentbox binary", cfg.Against)
		}
		sc.Against = cfg.Against
	}
	sc.Specs = strings.Split(repos, ",")
	sc.Runs, sc.Warmup = cfg.Runs, cfg.Warmup
	sc.CacheDir = policy.CacheDirFor(os.Getenv("XDG_CACHE_HOME"), os.Getenv("HOME"))
	if isTerminal(os.Stderr) {
		sc.Progress = os.Stderr
	} else {
		sc.Log = os.Stderr
	}
	for _, s := range sc.Specs {
		if _, err := bench.ParseScaleSpec(s); err != nil {
			return fail("bench: --scale-repos: %v", err)
		}
	}
	rows, err := bench.RunScale(sc)
	if err != nil {
		return fail("%v", err)
	}
	bench.WriteScaleText(os.Stdout, rows, sc.Runs)
	return 0
}
