package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/agentbox/agentbox/nsinit"
	"github.com/agentbox/agentbox/session"
)

// Report is one benchmark's result, as printed and as stored (JSON).
type Report struct {
	Summary   string    `json:"summary"` // one line, shown by agentbox log --results
	Command   []string  `json:"command"`
	Repo      string    `json:"repo"`
	Runs      int       `json:"runs"`
	Warmup    int       `json:"warmup"`
	Flags     string    `json:"launch_flags"` // what the launch variants add to agentbox exec
	Start     time.Time `json:"start"`
	End       time.Time `json:"end"`
	LoadStart float64   `json:"load_start"` // 1-minute load average
	LoadEnd   float64   `json:"load_end"`
	Notes     []string  `json:"notes,omitempty"`

	Variants []VariantReport `json:"variants"`
	// Ratios are medians of per-round ratios, e.g. "native/bwrap-plain".
	Ratios map[string]float64 `json:"ratios"`
	// Phases are the native backend's per-phase medians (AGENTBOX_TIMINGS), in order.
	Phases []PhaseReport `json:"native_phases"`
	// DefaultsAdd is the median per-round cost of the session extras (snapshot,
	// record, audit): native-defaults minus native, in ms.
	DefaultsAdd float64  `json:"defaults_add_ms"`
	RSS         RSS      `json:"peak_rss"`
	Targets     []Target `json:"targets"`
	// Throughput is launches per second through the Go API, back to back.
	Throughput []Throughput `json:"throughput,omitempty"`
	Version    string       `json:"agentbox_version,omitempty"`
	Machine    Machine      `json:"machine"`
}

// Machine is what the run was measured on.
type Machine struct {
	CPU    string `json:"cpu"`    // /proc/cpuinfo's model name
	Cores  int    `json:"cores"`  // CPUs the run could use
	Kernel string `json:"kernel"` // uname -r
}

func (m Machine) String() string {
	return fmt.Sprintf("%s, %d cores, Linux %s", orUnknown(m.CPU), m.Cores, orUnknown(m.Kernel))
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// VariantReport is one variant's figures.
type VariantReport struct {
	Name      string    `json:"name"`
	Desc      string    `json:"desc"`
	Wall      Stats     `json:"wall"`
	CPU       Stats     `json:"cpu"`
	MaxRSSKiB int64     `json:"max_rss_kib,omitempty"` // wait4's, over the process tree
	Samples   []float64 `json:"wall_ms"`               // successful launches, in round order
	Failed    int       `json:"failed,omitempty"`      // launches that failed
	FirstErr  string    `json:"first_error,omitempty"` // the first failure's message
	rounds    []float64 // per round, NaN where the launch failed (for ratios)
	cpuRounds []float64 // the same for CPU time
}

// PhaseReport is the median of one named phase.
type PhaseReport struct {
	Name   string  `json:"name"`
	Median float64 `json:"median_ms"`
}

// RSS are peak resident sizes in KiB.
type RSS struct {
	LauncherKiB   int64 `json:"launcher_kib"`    // agentbox exec --backend native (wait4: the largest of launcher, init, command)
	InitKiB       int64 `json:"init_kib"`        // the largest peak RSS an init of the Go API probe reported of itself (VmHWM)
	APIProgramKiB int64 `json:"api_program_kib"` // the Go API probe itself
}

// Throughput is one Go API variant's launches per second, the median over bursts of
// burstLaunches back-to-back launches.
type Throughput struct {
	Name      string  `json:"name"`
	PerSecond float64 `json:"launches_per_second"`
	Bursts    int     `json:"bursts"`
	FirstErr  string  `json:"first_error,omitempty"`
}

// Target is one of the launch-cost goals, checked against this run. The plain
// bubblewrap baseline is what a user would run instead; the targets are stated
// against it.
type Target struct {
	What  string  `json:"what"`
	Ratio float64 `json:"ratio"`
	Limit float64 `json:"limit"`
	Met   bool    `json:"met"`
}

func summarizeVariant(v variant, s []Sample) VariantReport {
	r := VariantReport{Name: v.name, Desc: v.desc, MaxRSSKiB: maxRSS(s)}
	var cpu []float64
	for _, x := range s {
		if x.Err != nil {
			r.Failed++
			if r.FirstErr == "" {
				r.FirstErr = x.Err.Error()
			}
			r.rounds = append(r.rounds, math.NaN())
			r.cpuRounds = append(r.cpuRounds, math.NaN())
			continue
		}
		r.Samples = append(r.Samples, ms(x.Wall))
		r.rounds = append(r.rounds, ms(x.Wall))
		r.cpuRounds = append(r.cpuRounds, ms(x.CPU))
		cpu = append(cpu, ms(x.CPU))
	}
	r.Wall, r.CPU = summarize(r.Samples), summarize(cpu)
	return r
}

func (r *Report) variant(name string) *VariantReport {
	for i := range r.Variants {
		if r.Variants[i].Name == name {
			return &r.Variants[i]
		}
	}
	return nil
}

// finish computes the ratios, phases, targets and summary.
func (r *Report) finish(samples map[string][]Sample) {
	r.Ratios = map[string]float64{}
	ratio := func(a, b string) float64 {
		va, vb := r.variant(a), r.variant(b)
		if va == nil || vb == nil {
			return math.NaN()
		}
		x := pairRatio(va.rounds, vb.rounds)
		r.Ratios[a+"/"+b] = x
		return x
	}
	// CPU time per launch, the launcher and everything it started: what a busy
	// machine makes a launch wait for.
	cpuRatio := func(a, b string) float64 {
		va, vb := r.variant(a), r.variant(b)
		if va == nil || vb == nil {
			return math.NaN()
		}
		x := pairRatio(va.cpuRounds, vb.cpuRounds)
		r.Ratios[cpuPrefix+a+"/"+b] = x
		return x
	}
	t1 := ratio(Native, AgentboxBwrap)
	t2 := ratio(Native, BwrapPlain)
	t5 := cpuRatio(Native, BwrapPlain)
	cpuRatio(Native, EmptyGo)
	cpuRatio(Native, AgainstPrefix+Native)
	t3 := ratio(GoAPI, BwrapPlain)
	t4 := ratio(NativeDefaults, Native)
	ratio(NativeDefaults, BwrapPlain)
	ratio(Native, BwrapPlan)
	ratio(GoAPI, BwrapPlan)
	ratio(Native, EmptyGo)
	ratio(GoAPI, Native)
	ratio(GoAPICold, BwrapPlain)
	ratio(GoAPI, GoAPICold)
	ratio(Native, AgainstPrefix+Native)
	ratio(NativeDefaults, AgainstPrefix+NativeDefaults)
	for _, lim := range []string{NativeLimits, NativeMemory} {
		ratio(lim, Native)
		cpuRatio(lim, Native)
	}
	for _, t := range []Target{
		{What: "native <= 0.85 x agentbox-bwrap", Ratio: t1, Limit: 0.85},
		{What: "native <= 1.15 x bwrap-plain", Ratio: t2, Limit: 1.15},
		{What: "native <= 1.00 x bwrap-plain (stretch)", Ratio: t2, Limit: 1.0},
		{What: "native <= 0.85 x bwrap-plain (issue 36)", Ratio: t2, Limit: 0.85},
		{What: "native CPU <= 1.00 x bwrap-plain CPU (issue 36)", Ratio: t5, Limit: 1.0},
		{What: "go-api <= 0.90 x bwrap-plain", Ratio: t3, Limit: 0.9},
		{What: "native-defaults <= 1.15 x native (issue 36)", Ratio: t4, Limit: 1.15},
	} {
		if math.IsNaN(t.Ratio) {
			continue
		}
		t.Met = t.Ratio <= t.Limit
		r.Targets = append(r.Targets, t)
	}
	if n, d := r.variant(Native), r.variant(NativeDefaults); n != nil && d != nil {
		var diff []float64
		for i := range n.rounds {
			if i < len(d.rounds) && !math.IsNaN(n.rounds[i]) && !math.IsNaN(d.rounds[i]) {
				diff = append(diff, d.rounds[i]-n.rounds[i])
			}
		}
		r.DefaultsAdd = median(diff)
	}
	r.Phases = phaseMedians(samples[nativeTimed])

	var b strings.Builder
	fmt.Fprintf(&b, "%s x%d:", strings.Join(r.Command, " "), r.Runs)
	for _, name := range []string{Native, NativeDefaults, NativeLimits, NativeMemory, AgentboxBwrap, BwrapPlain, BwrapPlan, GoAPI} {
		if v := r.variant(name); v != nil {
			fmt.Fprintf(&b, " %s %.2fms", name, v.Wall.Median)
		}
	}
	for _, k := range []string{Native + "/" + AgentboxBwrap, Native + "/" + BwrapPlain, cpuPrefix + Native + "/" + BwrapPlain, NativeDefaults + "/" + Native, NativeLimits + "/" + Native, NativeMemory + "/" + Native, GoAPI + "/" + BwrapPlain} {
		if x, ok := r.Ratios[k]; ok && !math.IsNaN(x) {
			fmt.Fprintf(&b, " %s %.2f", k, x)
		}
	}
	r.Summary = b.String()
}

// Derived phases: what the launcher's own timings leave between them, per launch.
const (
	derivedInitStart = "derived: init runtime start"    // total-setup - clone+idmap - the init's phases
	derivedSession   = "derived: command run, teardown" // session - total-setup - the host steps: the command, the init's exit, reaping
	derivedCLI       = "derived: CLI start and exit"    // wall - session: exec, Go runtime, flags, policy; exit and reap
)

// phaseMedians is the median of each phase name over the runs, in first-seen order,
// followed by the derived phases.
func phaseMedians(s []Sample) []PhaseReport {
	var order []string
	by := map[string][]float64{}
	add := func(name string, v float64) {
		if _, ok := by[name]; !ok {
			order = append(order, name)
		}
		by[name] = append(by[name], v)
	}
	type value struct {
		name string
		ms   float64
	}
	var derived []value
	for _, x := range s {
		if x.Err != nil {
			continue
		}
		named := map[string]float64{}
		var initPhases, hostPhases, duringSetup float64
		for _, p := range x.Phases {
			add(p.Name, ms(p.Dur))
			named[p.Name] = ms(p.Dur)
			switch {
			case strings.HasPrefix(p.Name, session.HostPhasePrefix):
				hostPhases += ms(p.Dur)
			case strings.HasPrefix(p.Name, session.DuringSetupPrefix):
				duringSetup += ms(p.Dur)
			case p.Name != session.PhaseSession && p.Name != nsinit.PhaseClone && p.Name != nsinit.PhaseSetup:
				initPhases += ms(p.Dur)
			}
		}
		if _, gated := named[nsinit.PhaseGate]; !gated {
			// The init could not wait: the work ran before the launch, on its own.
			hostPhases += duringSetup
		}
		b, okB := named[session.PhaseSession]
		st, okS := named[nsinit.PhaseSetup]
		c, okC := named[nsinit.PhaseClone]
		if okB && okS && okC {
			derived = append(derived,
				value{derivedInitStart, st - c - initPhases},
				value{derivedSession, b - st - hostPhases},
				value{derivedCLI, ms(x.Wall) - b})
		}
	}
	for _, d := range derived {
		add(d.name, d.ms)
	}
	out := make([]PhaseReport, 0, len(order))
	for _, n := range order {
		out = append(out, PhaseReport{Name: n, Median: median(by[n])})
	}
	return out
}

// JSON is the report for machines (--json, and what the shadow store keeps).
func (r *Report) JSON() ([]byte, error) {
	// NaN is not JSON: a ratio that could not be computed is left out.
	clean := map[string]float64{}
	for k, x := range r.Ratios {
		if !math.IsNaN(x) {
			clean[k] = x
		}
	}
	c := *r
	c.Ratios = clean
	if math.IsNaN(c.DefaultsAdd) {
		c.DefaultsAdd = 0
	}
	// A phase no launch reported has no median: left out too.
	c.Phases = nil
	for _, p := range r.Phases {
		if !math.IsNaN(p.Median) {
			c.Phases = append(c.Phases, p)
		}
	}
	return json.MarshalIndent(&c, "", "  ")
}

// WriteText prints the report for a person.
func (r *Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "agentbox bench: %q, %d interleaved rounds after %d warm-up, repo %s\n",
		strings.Join(r.Command, " "), r.Runs, r.Warmup, r.Repo)
	fmt.Fprintf(w, "load average %.2f at start, %.2f at end; %s\n", r.LoadStart, r.LoadEnd, r.End.Sub(r.Start).Round(time.Second))
	fmt.Fprintf(w, "launch variants use agentbox exec %s: the metadata snapshot and the shadow record\n", r.Flags)
	fmt.Fprintf(w, "have their own benchmarks; native-defaults keeps them (and the audit), in scratch dirs.\n")
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	for _, v := range r.Variants {
		if v.Failed > 0 {
			fmt.Fprintf(w, "FAILED: %s: %d of %d launches failed; first: %s\n", v.Name, v.Failed, v.Failed+len(v.Samples), v.FirstErr)
		}
	}
	fmt.Fprintf(w, "\n%-24s %8s %8s %8s %8s   %8s %8s\n", "wall ms", "min", "median", "p90", "max", "cpu med", "cpu p90")
	for _, v := range r.Variants {
		fmt.Fprintf(w, "%-24s %8.2f %8.2f %8.2f %8.2f   %8.2f %8.2f\n", v.Name,
			v.Wall.Min, v.Wall.Median, v.Wall.P90, v.Wall.Max, v.CPU.Median, v.CPU.P90)
	}
	fmt.Fprintf(w, "\nratios (median of per-round ratios):\n")
	keys := make([]string, 0, len(r.Ratios))
	for k := range r.Ratios {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !math.IsNaN(r.Ratios[k]) {
			fmt.Fprintf(w, "  %-42s %.3f\n", k, r.Ratios[k])
		}
	}
	if len(r.Targets) > 0 {
		fmt.Fprintf(w, "\ntargets:\n")
		for _, t := range r.Targets {
			verdict := "met"
			if !t.Met {
				verdict = "NOT met"
			}
			fmt.Fprintf(w, "  %-40s %.3f  %s\n", t.What, t.Ratio, verdict)
		}
	}
	if len(r.Throughput) > 0 {
		fmt.Fprintf(w, "\nthroughput (Go API, bursts of %d launches back to back, median):\n", burstLaunches)
		for _, t := range r.Throughput {
			if t.Bursts == 0 {
				fmt.Fprintf(w, "  %-16s failed: %s\n", t.Name, t.FirstErr)
				continue
			}
			fmt.Fprintf(w, "  %-16s %8.1f launches/s (%d bursts)\n", t.Name, t.PerSecond, t.Bursts)
		}
		if a, c := r.Throughput[0], r.Throughput[1]; a.Bursts > 0 && c.Bursts > 0 {
			fmt.Fprintf(w, "  Prestart: %.2fx the launches per second; latency (median per launch) %.2fx\n",
				a.PerSecond/c.PerSecond, r.Ratios[GoAPI+"/"+GoAPICold])
		}
	}
	if !math.IsNaN(r.DefaultsAdd) && r.variant(NativeDefaults) != nil {
		fmt.Fprintf(w, "\nsession defaults (snapshot + record + audit) add %.2f ms per launch (median per round)\n", r.DefaultsAdd)
	}
	if len(r.Phases) > 0 {
		fmt.Fprintf(w, "\nnative phases (median ms, AGENTBOX_TIMINGS):\n")
		for _, p := range r.Phases {
			fmt.Fprintf(w, "  %-40s %8.3f\n", p.Name, p.Median)
		}
	}
	fmt.Fprintf(w, "\npeak RSS: agentbox exec launcher %s (largest of its tree; its raw init shares its memory), the Go API's init %s, Go API program %s\n",
		kib(r.RSS.LauncherKiB), kib(r.RSS.InitKiB), kib(r.RSS.APIProgramKiB))
}

func kib(k int64) string {
	if k <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f MiB", float64(k)/1024)
}
