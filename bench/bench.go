// Package bench is the benchmark harness behind `agentbox bench`: it measures the
// launch of one command under the same sandbox policy through agentbox's native
// backend, agentbox's bwrap backend, bubblewrap run directly with the argv agentbox
// would give it, and agentbox's Go API, next to two floors (a plain fork/exec of the
// command and an empty Go binary). The variants run interleaved, one of each per
// round, so that a change in the machine's load hits all of them alike; ratios are
// taken round by round.
package bench

import (
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// Variant names. A round runs each once, in an order shuffled every round: what a
// launch leaves behind for a moment (the kernel's teardown of its namespaces) then
// falls on a random next variant, not always on the same one.
const (
	Native         = "native"              // agentbox exec --backend native
	AgentboxBwrap  = "agentbox-bwrap"      // agentbox exec --backend bwrap
	BwrapPlan      = "bwrap-agentbox-plan" // bwrap alone running agentbox's whole plan (compat.Command), status fd and seccomp
	BwrapPlain     = "bwrap-plain"         // bwrap alone with the policy as a user would write it by hand
	GoAPI          = "go-api"              // sandbox.Run from a small running Go program, with sandbox.Prestart
	GoAPICold      = "go-api-cold"         // the same without Prestart: clone and init start-up in the launch
	ForkExec       = "fork-exec"           // the command itself, no sandbox
	EmptyGo        = "empty-go"            // an empty static Go binary
	NativeDefaults = "native-defaults"     // agentbox exec with the session extras on
	NativeLimits   = "native-limits"       // native with --pids and --cpus: the session's limited cgroup, the raw init
	NativeMemory   = "native-memory"       // native-limits with --memory too: the Go init
	// AgainstPrefix names the --against binary's variants: "against:native" …
	AgainstPrefix = "against:"
	// cpuPrefix marks a ratio of CPU times per launch instead of wall times.
	cpuPrefix   = "cpu:"
	launchFlags = "--no-git-save --no-record"
	// limitFlags and memoryFlags are the limits the limit variants add: values any
	// host that enforces them accepts, far above what the command uses.
	limitFlags  = "--pids 1000 --cpus 1"
	memoryFlags = "--memory 512M " + limitFlags

	// nativeTimed is native with AGENTBOX_TIMINGS, launched once a round for the
	// phase breakdown only: printing the timings costs a launch about 2%, which the
	// measured variants, run as a user runs them, do not pay.
	nativeTimed = "native (AGENTBOX_TIMINGS)"
)

// Config is one benchmark run.
type Config struct {
	Agentbox string    // the agentbox binary measured (and used for --dry-run)
	Against  string    // another agentbox binary measured in the same rounds; empty: none
	Bwrap    string    // bubblewrap >= 0.12.0; empty: the bwrap variants are skipped
	NoBwrap  string    // with Bwrap empty: why none was found, for the report's note
	GoTool   string    // the go command that builds the empty binary; empty: skipped
	Repo     string    // the writable repository; empty: a fresh Git repository in /tmp
	Command  []string  // what runs in the sandbox
	Runs     int       // measured rounds
	Warmup   int       // rounds run first and discarded
	CacheDir string    // where the empty Go binary is kept between runs
	Progress io.Writer // a terminal for progress lines; nil: none
	Version  string    // agentbox's version, for the report and the picture
}

// Sample is one measured launch.
type Sample struct {
	Wall   time.Duration
	CPU    time.Duration // user+system of the process tree (wait4) and of what it left running
	MaxRSS int64         // KiB, from wait4: the largest process of the tree
	Phases []phase       // AGENTBOX_TIMINGS lines (agentbox variants)
	Err    error         // the launch failed; the other fields are unset
}

type phase struct {
	Name string
	Dur  time.Duration
}

// variant is one way to launch the command.
type variant struct {
	name string
	desc string
	run  func() (Sample, error)
	// phasesOnly: its samples feed the phase breakdown, not the figures.
	phasesOnly bool
}

// Run measures every available variant cfg.Runs times, interleaved, after
// cfg.Warmup discarded rounds, and returns the report. It removes everything it
// created except the cached empty Go binary.
func Run(cfg Config) (*Report, error) {
	if len(cfg.Command) == 0 {
		cfg.Command = []string{"true"}
	}
	if cfg.Runs < 1 {
		return nil, fmt.Errorf("bench: --runs %d: want at least 1", cfg.Runs)
	}
	env, err := newEnv(cfg)
	if err != nil {
		return nil, err
	}
	defer env.close()

	rep := &Report{
		Command: cfg.Command, Repo: env.repo, Runs: cfg.Runs, Warmup: cfg.Warmup,
		Start: time.Now(), LoadStart: loadAvg(), Notes: env.notes,
		Flags: launchFlags, Version: cfg.Version, Machine: thisMachine(),
	}
	// Ctrl-C or SIGTERM ends the run after the launch in flight, so that the
	// deferred cleanup removes the repository, scratch dir and staging.
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(stop)

	vs := env.variants()
	samples := make(map[string][]Sample, len(vs))
	total := cfg.Warmup + cfg.Runs
	for round := 0; round < total; round++ {
		select {
		case sig := <-stop:
			return nil, fmt.Errorf("bench: stopped by %v after %d of %d rounds; nothing left behind", sig, round, total)
		default:
		}
		if cfg.Progress != nil {
			what := "round"
			if round < cfg.Warmup {
				what = "warm-up"
			}
			fmt.Fprintf(cfg.Progress, "\ragentbox bench: %s %d/%d ", what, round+1, total)
		}
		for _, i := range rand.Perm(len(vs)) {
			v := vs[i]
			s, err := v.run()
			if err != nil {
				// A failed launch is counted and reported, not retried and not
				// fatal: one flaky launch in hundreds is a finding, and the
				// other variants' figures stay valid.
				s = Sample{Err: err}
			}
			if round >= cfg.Warmup {
				samples[v.name] = append(samples[v.name], s)
			}
		}
	}
	if cfg.Progress != nil {
		fmt.Fprint(cfg.Progress, "\r\033[K")
	}
	rep.End, rep.LoadEnd = time.Now(), loadAvg()
	for _, v := range vs {
		if !v.phasesOnly {
			rep.Variants = append(rep.Variants, summarizeVariant(v, samples[v.name]))
		}
	}
	if rss, err := env.apiCold.rss(); err == nil {
		rep.RSS = rss
	}
	rep.RSS.LauncherKiB = maxRSS(samples[Native])
	rep.Throughput = measureThroughput(env, cfg)
	rep.finish(samples)
	return rep, nil
}

// measureThroughput runs bursts of back-to-back launches through the Go API, with and
// without Prestart, interleaved: launches per second, the figure Prestart's latency
// gain does not show (its refill runs after each launch, on the same cores).
func measureThroughput(env *env, cfg Config) []Throughput {
	probes := []struct {
		name string
		p    *apiProbe
	}{{GoAPI, env.api}, {GoAPICold, env.apiCold}}
	rates := make([][]float64, len(probes))
	var errs []string
	for b := 0; b < max(3, cfg.Runs/burstLaunches); b++ {
		for _, i := range rand.Perm(len(probes)) {
			r, err := probes[i].p.burst()
			if err != nil {
				errs = append(errs, fmt.Sprintf("%s: %v", probes[i].name, err))
				continue
			}
			rates[i] = append(rates[i], r)
		}
	}
	var out []Throughput
	for i, p := range probes {
		out = append(out, throughputOf(p.name, rates[i], errs))
	}
	return out
}

// throughputOf is one probe's Throughput from the rates of its bursts; a probe
// none of whose bursts ran has no rate (0), not NaN, which JSON cannot hold.
func throughputOf(name string, rates []float64, errs []string) Throughput {
	t := Throughput{Name: name, Bursts: len(rates)}
	if len(rates) > 0 {
		t.PerSecond = median(rates)
	}
	if len(errs) > 0 {
		t.FirstErr = errs[0]
	}
	return t
}

func maxRSS(s []Sample) int64 {
	var m int64
	for _, x := range s {
		m = max(m, x.MaxRSS)
	}
	return m
}

// parseTimings reads agentbox's AGENTBOX_TIMINGS lines from its stderr:
// "agentbox: timings: NAME DURATION", NAME possibly with spaces.
func parseTimings(stderr string) []phase {
	var out []phase
	for _, line := range strings.Split(stderr, "\n") {
		rest, ok := strings.CutPrefix(line, "agentbox: timings: ")
		if !ok {
			continue
		}
		i := strings.LastIndexByte(rest, ' ')
		if i < 0 {
			continue
		}
		d, err := time.ParseDuration(rest[i+1:])
		if err != nil {
			continue
		}
		out = append(out, phase{Name: strings.TrimSpace(rest[:i]), Dur: d})
	}
	return out
}

// loadAvg is the first field of /proc/loadavg, or -1.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	var l float64
	if _, err := fmt.Sscan(string(b), &l); err != nil {
		return -1
	}
	return l
}
