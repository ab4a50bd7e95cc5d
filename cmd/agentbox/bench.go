package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	"github.com/agentbox/agentbox/bench"
	"github.com/agentbox/agentbox/bwrapcheck"
	"github.com/agentbox/agentbox/policy"
	"github.com/agentbox/agentbox/sandbox"
	"github.com/agentbox/agentbox/shadow"
)

const benchUsage = `Usage: agentbox bench [flags] [-- COMMAND [ARG...]]

Measures the launch of COMMAND (default: true) under the same sandbox policy,
interleaved round by round: agentbox exec --backend native, agentbox exec --backend
bwrap, bubblewrap alone on the same plan (the argv 'agentbox exec --dry-run --backend
bwrap' prints, without agentbox's init inside), agentbox's Go API, and two floors
(fork/exec of the command, an empty Go binary). The launch variants run with --no-git-save --no-record; native-defaults
shows what the snapshot, the record and the audit add. The result is stored in the
results store (agentbox log --results) unless --no-store.

Flags:
`

func cmdBench(args []string) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var (
		cfg      bench.Config
		asJSON   = fs.Bool("json", false, "print the result as JSON")
		svg      = fs.String("svg", "", "draw the wall-time distributions to `FILE` (SVG)")
		noStore  = fs.Bool("no-store", false, "do not store the result in the results store")
		bwrap    = fs.String("bwrap", "", "bubblewrap >= 0.12.0 to compare with (default: $AGENTBOX_BWRAP, else PATH)")
		serveAPI = fs.Bool("serve-api", false, "internal: be the Go API variant's probe")
		prestart = fs.Bool("prestart", false, "internal: with --serve-api, use sandbox.Prestart")
		scale    = fs.Bool("scale", false, "run the scaling scenario instead: generated repositories of growing size (see --scale-repos)")
		scaleCfg bench.ScaleConfig
		repos    = fs.String("scale-repos", "20,100000:1.5G", "with --scale: repository shapes `FILES[:PACK],...` (generated once into the cache)")
	)
	fs.IntVar(&scaleCfg.Sessions, "scale-sessions", 20, "with --scale: unchanged sessions whose snapshots' disk is measured")
	fs.IntVar(&scaleCfg.First, "scale-first", 3, "with --scale: first sessions (each from an empty state) measured")
	fs.IntVar(&cfg.Runs, "runs", 100, "measured rounds (one launch of each variant per round)")
	fs.IntVar(&cfg.Warmup, "warmup", 5, "rounds run first and discarded")
	fs.StringVar(&cfg.Repo, "repo", "", "the writable repository `DIR` (default: a fresh Git repository in /tmp, removed after)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(os.Stdout, benchUsage)
			fs.SetOutput(os.Stdout)
			fs.PrintDefaults()
			return 0
		}
		return fail("bench: %v", err)
	}
	cfg.Command = fs.Args()
	if len(cfg.Command) == 0 {
		cfg.Command = []string{"true"}
	}
	if *serveAPI {
		return serveBenchAPI(cfg, *prestart)
	}
	if *scale {
		return runScale(scaleCfg, cfg, *repos)
	}

	self, err := os.Executable()
	if err != nil {
		return fail("bench: find the agentbox binary: %v", err)
	}
	cfg.Agentbox = self
	if *bwrap != "" {
		os.Setenv(bwrapcheck.EnvVar, *bwrap)
	}
	if bin, err := bwrapcheck.Lookup(); err == nil {
		cfg.Bwrap = bin.Path
	} else {
		fmt.Fprintf(os.Stderr, "agentbox: bench: bwrap variants skipped: %v\n", err)
	}
	if g, err := exec.LookPath("go"); err == nil {
		cfg.GoTool = g
	}
	cfg.CacheDir = policy.CacheDirFor(os.Getenv("XDG_CACHE_HOME"), os.Getenv("HOME"))
	if isTerminal(os.Stderr) {
		cfg.Progress = os.Stderr
	}

	rep, err := bench.Run(cfg)
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
		fmt.Printf("%s\n", doc)
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
