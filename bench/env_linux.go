package bench

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/compat"
	"github.com/agentbox/agentbox/gitguard/pushguard"
	"github.com/agentbox/agentbox/internal/hostpath"
	"github.com/agentbox/agentbox/internal/seccomp"
	"github.com/agentbox/agentbox/mounts"
)

// env is what the variants share: the repository, the bench's scratch directory,
// the prepared bwrap argv and the Go API probe. close removes all of it.
type env struct {
	cfg     Config
	repo    string
	ownRepo bool   // repo was created by the bench
	work    string // scratch: seccomp program, snapshots and state of native-defaults
	notes   []string

	environ   []string // the agentbox variants' environment
	bwrapArgv []string // bwrap-agentbox-plan's argv; nil: skipped
	plainArgv []string // bwrap-plain's argv; nil: skipped
	guard     *pushguard.StagedGuard
	seccomp   string       // file holding the terminal-injection filter for bwrap's fd 4
	devnull   *os.File     // bwrap's --json-status-fd 3
	command   string       // cfg.Command[0] resolved on PATH, for fork-exec
	emptyGo   string       // the empty Go binary; "": skipped
	limits    []string     // the limit variants this host enforces (NativeLimits, NativeMemory)
	api       *apiProbe    // with sandbox.Prestart
	apiCold   *apiProbe    // without
	keep      map[int]bool // the bench's long-lived children: not a launch's leftovers
}

func newEnv(cfg Config) (_ *env, err error) {
	// e is not the named result: "return nil, err" must leave it for the cleanup.
	e := &env{cfg: cfg}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	if err := adoptOrphans(); err != nil {
		return nil, fmt.Errorf("bench: become the reaper of the launches' leftovers: %w", err)
	}
	if e.work, err = os.MkdirTemp("", "agentbox-bench-"); err != nil {
		return nil, fmt.Errorf("bench: scratch directory: %w", err)
	}
	if err := e.prepareRepo(); err != nil {
		return nil, err
	}
	e.environ = os.Environ()
	if cfg.Bwrap != "" {
		e.environ = append(e.environ, "AGENTBOX_BWRAP="+cfg.Bwrap)
		if err := e.prepareBwrapPlans(); err != nil {
			return nil, err
		}
	} else {
		why := cfg.NoBwrap
		if why == "" {
			why = "no bubblewrap >= 0.12.0 found (set AGENTBOX_BWRAP or --bwrap)"
		}
		e.notes = append(e.notes, "bwrap variants skipped: "+why)
	}
	// The floor runs the command on the host, unsandboxed: found as any program
	// agentbox runs on the host is, never in the repository the sessions write.
	e.command = cfg.Command[0]
	if !strings.ContainsRune(e.command, '/') {
		e.command, err = hostpath.LookPath(e.command, e.repo)
	}
	if err != nil {
		return nil, fmt.Errorf("bench: command %s: %w", cfg.Command[0], err)
	}
	if err := e.probeNative(); err != nil {
		return nil, err
	}
	e.probeLimits()
	if err := e.prepareEmptyGo(); err != nil {
		e.notes = append(e.notes, fmt.Sprintf("empty Go binary skipped: %v", err))
	}
	if e.api, err = startAPIProbe(cfg.Agentbox, e.repo, cfg.Command, true); err != nil {
		return nil, err
	}
	if e.apiCold, err = startAPIProbe(cfg.Agentbox, e.repo, cfg.Command, false); err != nil {
		return nil, err
	}
	e.keep = map[int]bool{e.api.cmd.Process.Pid: true, e.apiCold.cmd.Process.Pid: true}
	return e, nil
}

// probeNative launches true once as the native variant launches the command. Where
// agentbox refuses the native backend (user namespaces switched off, no overlayfs
// in them…) there is nothing to measure, and the bench refuses with agentbox's own
// reason instead of timing refusals. true, not the command: a command may exit 125
// itself, and one that fails is left to the rounds to count.
func (e *env) probeNative() error {
	probe, err := hostpath.LookPath("true", e.repo)
	if err != nil {
		return nil // the rounds will say what fails
	}
	args := append(append([]string{"exec", "--backend", "native"}, strings.Fields(launchFlags)...), "--repo", e.repo, "--", probe)
	_, err = e.execOnce(e.cfg.Agentbox, args, e.environ, nil)
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == refusedStatus {
		return fmt.Errorf("bench: the native backend cannot launch here, so there is nothing to measure: %v", err)
	}
	return nil
}

// refusedStatus is agentbox's exit status when it refuses to launch.
const refusedStatus = 125

// probeLimits launches once with each set of limits and keeps the variants this
// host enforces. agentbox refuses a limit it cannot enforce (cgroup v1, no
// delegation) with exit 125 and the reason, which the note passes on: on such a host
// the variants are skipped, not measured as something else.
func (e *env) probeLimits() {
	for _, v := range []struct{ name, flags string }{{NativeLimits, limitFlags}, {NativeMemory, memoryFlags}} {
		args := append(append([]string{"exec", "--backend", "native"}, strings.Fields(launchFlags+" "+v.flags)...), "--repo", e.repo, "--")
		if _, err := e.execOnce(e.cfg.Agentbox, append(args, e.cfg.Command...), e.environ, nil); err != nil {
			e.notes = append(e.notes, fmt.Sprintf("%s skipped (a launch with %s failed): %v", v.name, v.flags, err))
			continue
		}
		e.limits = append(e.limits, v.name)
	}
}

// prepareRepo uses --repo, or creates a fresh Git repository with one commit, so that
// the plan holds the protected Git paths a real repository has.
func (e *env) prepareRepo() error {
	if e.cfg.Repo != "" {
		abs, err := filepath.Abs(e.cfg.Repo)
		if err != nil {
			return fmt.Errorf("bench: --repo: %w", err)
		}
		e.repo = abs
		return nil
	}
	dir, err := os.MkdirTemp("", "agentbox-bench-repo-")
	if err != nil {
		return fmt.Errorf("bench: repository: %w", err)
	}
	e.repo, e.ownRepo = dir, true
	git, err := hostpath.LookPath("git")
	if err != nil {
		e.notes = append(e.notes, "git not found: the repository is a plain directory (no protected Git paths)")
		return nil
	}
	for _, args := range [][]string{
		{"init", "-q"},
		{"-c", "user.name=bench", "-c", "user.email=bench@agentbox.invalid", "commit", "-q", "--allow-empty", "-m", "bench"},
	} {
		cmd := exec.Command(git, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("bench: git %s in %s: %v: %s", args[0], dir, err, bytes.TrimSpace(out))
		}
	}
	return nil
}

// prepareBwrapPlans builds the plain baseline and bubblewrap's own argv for the plan `agentbox exec
// --dry-run --json --backend bwrap` prints, translated by compat.Command — the same
// translation agentbox's bwrap backend runs, without agentbox's init inside: plain
// bwrap doing the whole policy. The push guard's staging directory, shown with
// XXXXXX, is staged once for all runs, and the descriptors bwrap is told about (3: its
// JSON status, 4: the seccomp program) are provided by the bench.
func (e *env) prepareBwrapPlans() error {
	args := append([]string{"exec", "--dry-run", "--json", "--backend", "bwrap"}, strings.Fields(launchFlags)...)
	args = append(append(args, "--repo", e.repo, "--"), e.cfg.Command...)
	cmd := exec.Command(e.cfg.Agentbox, args...)
	cmd.Dir, cmd.Env = e.repo, e.environ
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("bench: agentbox exec --dry-run --json --backend bwrap: %v: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	var plan mounts.Plan
	if err := json.Unmarshal(out, &plan); err != nil {
		return fmt.Errorf("bench: read the --dry-run --json plan: %w", err)
	}
	if err := e.stageGuard(&plan); err != nil {
		return err
	}
	argv, err := compat.Command(e.cfg.Bwrap, plan)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	prog, err := seccomp.Program(seccomp.Rules{ConfineSockets: plan.ConfineSockets})
	if err != nil {
		return fmt.Errorf("bench: seccomp program: %w", err)
	}
	e.seccomp = filepath.Join(e.work, "seccomp.bpf")
	if err := os.WriteFile(e.seccomp, prog, 0o600); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if e.devnull, err = os.OpenFile(os.DevNull, os.O_WRONLY, 0); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	e.bwrapArgv = argv
	e.plainArgv = plainBwrapArgv(e.cfg.Bwrap, plan, e.repo, os.Getenv("HOME"), e.cfg.Command)
	return nil
}

// plainBwrapArgv is bubblewrap running the policy as a user would write it by hand:
// the host read-only, a throw-away overlay on HOME, fresh /tmp and /run, the
// repository writable with the Git paths the plan protects bound read-only over it,
// a fresh /proc and /dev, every namespace but the network's. No status fd, no seccomp
// program, no init of agentbox's: the baseline a user would compare agentbox with.
// (/tmp and /run come before the repository, which may live in /tmp.)
func plainBwrapArgv(bwrap string, plan mounts.Plan, repo, home string, command []string) []string {
	argv := []string{bwrap, "--ro-bind", "/", "/"}
	if fi, err := os.Stat(home); err == nil && fi.IsDir() && home != "/" && !strings.HasPrefix(home+"/", "/tmp/") {
		argv = append(argv, "--overlay-src", home, "--tmp-overlay", home)
	}
	argv = append(argv, "--tmpfs", "/tmp", "--tmpfs", "/run", "--bind", repo, repo)
	for _, op := range plan.Ops {
		if op.Kind == mounts.BindRO && strings.HasPrefix(op.Dest, repo+"/") {
			argv = append(argv, "--ro-bind-try", op.Dest, op.Dest)
		}
	}
	argv = append(argv, "--proc", "/proc", "--dev", "/dev", "--unshare-all", "--share-net", "--die-with-parent", "--chdir", repo, "--")
	return append(argv, command...)
}

// dryRunStage finds the push guard's staging directory as --dry-run shows it,
// /tmp/PREFIX<pid>-XXXXXX, at the start of a; n is its length, 0 when absent. (No
// package-level regexp: every agentbox process, the init too, would compile it.)
func dryRunStage(a string) int {
	p := "/tmp/" + pushguard.GuardStagePrefix
	if !strings.HasPrefix(a, p) {
		return 0
	}
	i := len(p)
	for i < len(a) && a[i] >= '0' && a[i] <= '9' {
		i++
	}
	if i == len(p) || !strings.HasPrefix(a[i:], "-XXXXXX") {
		return 0
	}
	return i + len("-XXXXXX")
}

// stageGuard stages the push guard for real where plan shows its placeholder.
func (e *env) stageGuard(plan *mounts.Plan) error {
	needed := false
	for _, op := range plan.Ops {
		needed = needed || dryRunStage(op.Source) > 0 || dryRunStage(op.Dest) > 0
	}
	if !needed {
		return nil
	}
	h, found, err := pushguard.FindHostGit(os.Getenv)
	if err != nil || !found {
		return fmt.Errorf("bench: the plan has a push guard but no host git was found (%v)", err)
	}
	if e.guard, err = pushguard.StageGuard(h); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	for i := range plan.Ops {
		op := &plan.Ops[i]
		if n := dryRunStage(op.Source); n > 0 {
			op.Source = e.guard.Dir + op.Source[n:]
		}
		if n := dryRunStage(op.Dest); n > 0 {
			op.Dest = e.guard.Dir + op.Dest[n:]
		}
	}
	return nil
}

// emptyGoSource is the floor (e): a Go program that does nothing.
const emptyGoSource = "package main\n\nfunc main() {}\n"

// prepareEmptyGo builds the empty Go binary once into the cache dir (CGO_ENABLED=0,
// static), keyed by the Go version that built it.
func (e *env) prepareEmptyGo() error {
	if e.cfg.GoTool == "" {
		return errors.New("no go command on PATH")
	}
	ver, err := exec.Command(e.cfg.GoTool, "env", "GOVERSION").Output()
	if err != nil {
		return fmt.Errorf("go env GOVERSION: %w", err)
	}
	if e.cfg.CacheDir == "" {
		return errors.New("no cache dir ($XDG_CACHE_HOME and $HOME unset)")
	}
	bin := filepath.Join(e.cfg.CacheDir, "bench", "empty-"+strings.TrimSpace(string(ver)))
	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() {
		e.emptyGo = bin
		return nil
	}
	src := filepath.Join(e.work, "emptygo")
	if err := os.MkdirAll(src, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte(emptyGoSource), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module emptygo\n\ngo 1.21\n"), 0o600); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o700); err != nil {
		return err
	}
	tmp := bin + ".tmp"
	cmd := exec.Command(e.cfg.GoTool, "build", "-trimpath", "-buildvcs=false", "-o", tmp, ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("go build: %v: %s", err, bytes.TrimSpace(out))
	}
	if err := os.Rename(tmp, bin); err != nil {
		return err
	}
	e.emptyGo = bin
	return nil
}

func (e *env) close() {
	for _, p := range []*apiProbe{e.api, e.apiCold} {
		if p != nil {
			p.close()
		}
	}
	if e.guard != nil {
		_ = e.guard.Remove()
	}
	if e.devnull != nil {
		e.devnull.Close()
	}
	if e.work != "" {
		_ = os.RemoveAll(e.work)
	}
	if e.ownRepo {
		_ = os.RemoveAll(e.repo)
	}
}

// variants lists what a round measures, given what was found.
func (e *env) variants() []variant {
	agentbox := func(backend string, extra ...string) []string {
		a := append([]string{"exec", "--backend", backend}, extra...)
		return append(append(a, "--repo", e.repo, "--"), e.cfg.Command...)
	}
	flags := strings.Fields(launchFlags)
	timed := append(append([]string(nil), e.environ...), "AGENTBOX_TIMINGS=1")
	vs := []variant{{
		name: Native, desc: "agentbox exec --backend native " + launchFlags,
		run: func() (Sample, error) {
			return e.execOnce(e.cfg.Agentbox, agentbox("native", flags...), e.environ, nil)
		},
	}, {
		name: nativeTimed, desc: "agentbox exec --backend native " + launchFlags + ", AGENTBOX_TIMINGS=1 (phases only)",
		run: func() (Sample, error) {
			return e.execOnce(e.cfg.Agentbox, agentbox("native", flags...), timed, nil)
		},
		phasesOnly: true,
	}}
	for _, name := range e.limits {
		lim := limitFlags
		if name == NativeMemory {
			lim = memoryFlags
		}
		args := agentbox("native", append(append([]string(nil), flags...), strings.Fields(lim)...)...)
		vs = append(vs, variant{
			name: name, desc: "agentbox exec --backend native " + launchFlags + " " + lim,
			run: func() (Sample, error) { return e.execOnce(e.cfg.Agentbox, args, e.environ, nil) },
		})
	}
	if e.bwrapArgv != nil {
		vs = append(vs, variant{
			name: AgentboxBwrap, desc: "agentbox exec --backend bwrap " + launchFlags,
			run: func() (Sample, error) { return e.execOnce(e.cfg.Agentbox, agentbox("bwrap", flags...), e.environ, nil) },
		}, variant{
			name: BwrapPlan, desc: "bwrap alone running agentbox's whole plan: argv = compat.Command(plan of --dry-run --json --backend bwrap), with --json-status-fd 3 and --add-seccomp-fd 4 from the bench",
			run: e.bwrapOnce,
		}, variant{
			name: BwrapPlain, desc: "bwrap alone with the policy as a user writes it: --ro-bind / /, --tmp-overlay HOME, --tmpfs /tmp /run, --bind REPO, --ro-bind-try of the protected Git paths, --proc, --dev, --unshare-all --share-net --die-with-parent",
			run: func() (Sample, error) {
				return e.execOnce(e.plainArgv[0], e.plainArgv[1:], os.Environ(), nil)
			},
		})
	}
	vs = append(vs, variant{
		name: GoAPI, desc: "sandbox.Run from a running small Go program with sandbox.Prestart (agentbox bench --serve-api --prestart)",
		run: e.api.run,
	}, variant{
		name: GoAPICold, desc: "sandbox.Run from a running small Go program, no Prestart (agentbox bench --serve-api)",
		run: e.apiCold.run,
	}, variant{
		name: ForkExec, desc: "fork/exec of the command, no sandbox",
		run: func() (Sample, error) {
			return e.execOnce(e.command, e.cfg.Command[1:], os.Environ(), nil)
		},
	})
	if e.emptyGo != "" {
		vs = append(vs, variant{
			name: EmptyGo, desc: "an empty static Go binary",
			run: func() (Sample, error) { return e.execOnce(e.emptyGo, nil, os.Environ(), nil) },
		})
	}
	bins := []struct{ prefix, path string }{{"", e.cfg.Agentbox}}
	if e.cfg.Against != "" {
		bins = append(bins, struct{ prefix, path string }{AgainstPrefix, e.cfg.Against})
	}
	for _, bin := range bins {
		// Each binary keeps its own snapshots and state: one's store format is not
		// the other's to read.
		snap := filepath.Join(e.work, bin.prefix+"snapshots")
		defEnv := append(append([]string(nil), e.environ...), "XDG_STATE_HOME="+filepath.Join(e.work, bin.prefix+"state"))
		path := bin.path
		if bin.prefix != "" {
			vs = append(vs, variant{
				name: bin.prefix + Native, desc: path + " exec --backend native " + launchFlags,
				run: func() (Sample, error) {
					return e.execOnce(path, agentbox("native", flags...), e.environ, nil)
				},
			})
		}
		vs = append(vs, variant{
			name: bin.prefix + NativeDefaults, desc: path + " exec --backend native with snapshot, record and audit (scratch dirs)",
			run: func() (Sample, error) {
				return e.execOnce(path, agentbox("native", "--git-save-dir", snap), defEnv, nil)
			},
		})
	}
	return vs
}

// execOnce runs path with args in the repository and measures it; a non-zero exit
// is an error carrying the process's stderr.
func (e *env) execOnce(path string, args []string, environ []string, extra []*os.File) (Sample, error) {
	cmd := &exec.Cmd{Path: path, Args: append([]string{path}, args...), Dir: e.repo, Env: environ, ExtraFiles: extra}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	t0 := time.Now()
	err := cmd.Run()
	wall := time.Since(t0)
	if err != nil {
		return Sample{}, fmt.Errorf("%s %s: %w: %s", filepath.Base(path), strings.Join(args, " "), err, lastLine(stderr.String()))
	}
	s := Sample{Wall: wall, Phases: parseTimings(stderr.String())}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		s.CPU = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		s.MaxRSS = ru.Maxrss
	}
	// What the launch left running (agentbox's raw init, which ends after the
	// launcher) is its CPU too; reaped here, it also ends before the next launch.
	s.CPU += reapOrphans(e.keep)
	return s, nil
}

func (e *env) bwrapOnce() (Sample, error) {
	prog, err := os.Open(e.seccomp) // bwrap reads fd 4 to its end: a fresh offset each run
	if err != nil {
		return Sample{}, err
	}
	defer prog.Close()
	return e.execOnce(e.bwrapArgv[0], e.bwrapArgv[1:], os.Environ(), []*os.File{e.devnull, prog})
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// apiProbe is the Go API variant's small running Go program: the agentbox binary in
// `bench --serve-api` mode, which launches on request and reports its own timing.
type apiProbe struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func startAPIProbe(agentbox, repo string, command []string, prestart bool) (*apiProbe, error) {
	args := []string{"bench", "--serve-api", "--repo", repo}
	if prestart {
		args = append(args, "--prestart")
	}
	args = append(append(args, "--"), command...)
	cmd := exec.Command(agentbox, args...)
	cmd.Dir = repo
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start the Go API probe: %w", err)
	}
	return &apiProbe{cmd: cmd, in: in, out: bufio.NewReader(out)}, nil
}

func (p *apiProbe) ask(req string, v any) error {
	if _, err := io.WriteString(p.in, req+"\n"); err != nil {
		return fmt.Errorf("go-api probe: %w", err)
	}
	line, err := p.out.ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("go-api probe: %w", err)
	}
	return json.Unmarshal(line, v)
}

func (p *apiProbe) run() (Sample, error) {
	var r probeRun
	if err := p.ask("run", &r); err != nil {
		return Sample{}, err
	}
	if r.Err != "" {
		return Sample{}, errors.New(r.Err)
	}
	if r.Status != 0 {
		return Sample{}, fmt.Errorf("command exited %d", r.Status)
	}
	s := Sample{Wall: time.Duration(r.WallNS), CPU: time.Duration(r.CPUNS)}
	for _, ph := range r.Phases {
		s.Phases = append(s.Phases, phase{Name: ph.Name, Dur: ph.Dur})
	}
	return s, nil
}

// burst runs burstLaunches back to back in the probe: launches per second.
func (p *apiProbe) burst() (float64, error) {
	var r probeBurst
	if err := p.ask("burst", &r); err != nil {
		return 0, err
	}
	if r.Err != "" {
		return 0, errors.New(r.Err)
	}
	return float64(r.Launches) / time.Duration(r.WallNS).Seconds(), nil
}

func (p *apiProbe) rss() (RSS, error) {
	var r probeRSS
	if err := p.ask("rss", &r); err != nil {
		return RSS{}, err
	}
	return RSS{APIProgramKiB: r.SelfKiB, InitKiB: r.ChildrenKiB}, nil
}

func (p *apiProbe) close() {
	p.in.Close() // the probe exits at EOF
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}
