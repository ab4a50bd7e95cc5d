// Package kmatrix boots real Debian kernels in qemu and runs agentbox's tests inside
// each, as an unprivileged user, to prove that agentbox works — or refuses clearly —
// on every kernel its users run.
//
// For each Cell it fetches the kernel's packages from Debian's archive (resolved
// and checked through the suite's Packages.xz, cached per machine), extracts vmlinuz
// and the overlay module, builds a newc initramfs holding a static Go /init
// (cmd/kmatrix/vminit), the agentbox binary, the test binaries (go test -c) and the
// few host programs the tests call, boots it with a bounded time, and reads the
// results from the serial console. A VM that fails to boot or hangs is a failed
// cell carrying its console tail.
//
// It needs qemu-system-x86_64, dpkg-deb, xz and zstd on the host, and Go to build
// the binaries. It is meant for CI and for a developer's machine, not for users.
package kmatrix

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/kmatrix/vmproto"
)

// Options configure a matrix run.
type Options struct {
	Cells    []Cell        // default DefaultCells
	Tests    []TestPackage // default TestPackages
	Mirror   string        // default DefaultMirror
	Cache    string        // kernel cache; default DefaultCache
	Work     string        // build directory; default a temporary one, removed after
	Parallel int           // VMs at once; default 2
	Timeout  time.Duration // per VM; default 150 s
	MemoryMB int           // per VM; default 1024
	// ModuleRoot is the agentbox checkout to build; default: found from the
	// working directory.
	ModuleRoot string
	Log        func(format string, args ...any)
}

// DefaultCache is where kernels are kept between runs.
const DefaultCache = "/var/cache/agentbox-test/kernels"

// Matrix is the result of a run.
type Matrix struct {
	Summary string    `json:"summary"` // one line: cells passed / failed, time
	Start   time.Time `json:"start"`
	Seconds float64   `json:"seconds"` // wall time of the whole run
	Accel   string    `json:"accel"`
	Results []Result  `json:"results"`
}

// Passed reports whether every cell passed.
func (m Matrix) Passed() bool {
	for _, r := range m.Results {
		if !r.Pass {
			return false
		}
	}
	return len(m.Results) > 0
}

func (o *Options) defaults() error {
	if o.Cells == nil {
		o.Cells = DefaultCells
	}
	if o.Tests == nil {
		o.Tests = TestPackages
	}
	if o.Mirror == "" {
		o.Mirror = DefaultMirror
	}
	if o.Cache == "" {
		o.Cache = DefaultCache
	}
	if o.Parallel <= 0 {
		o.Parallel = 2
	}
	if o.Timeout == 0 {
		o.Timeout = 150 * time.Second
	}
	if o.MemoryMB == 0 {
		o.MemoryMB = 1024
	}
	if o.Log == nil {
		o.Log = func(string, ...any) {}
	}
	if o.ModuleRoot == "" {
		root, err := findModuleRoot()
		if err != nil {
			return err
		}
		o.ModuleRoot = root
	}
	return nil
}

// Run runs the matrix. An error means the matrix could not be set up (no qemu, a
// build failed); a cell that fails is a failed Result, not an error.
func Run(ctx context.Context, opts Options) (Matrix, error) {
	if err := opts.defaults(); err != nil {
		return Matrix{}, err
	}
	m := Matrix{Start: time.Now().UTC(), Accel: Accel()}
	if err := checkTools(); err != nil {
		return m, err
	}
	work := opts.Work
	if work == "" {
		dir, err := os.MkdirTemp("", "kmatrix-")
		if err != nil {
			return m, err
		}
		defer os.RemoveAll(dir)
		work = dir
	}

	// Build the binaries and fetch the kernels at the same time.
	var (
		wg       sync.WaitGroup
		bins     builtBinaries
		buildErr error
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		bins, buildErr = buildBinaries(ctx, opts.ModuleRoot, filepath.Join(work, "bin"), opts.Tests, opts.Log)
	}()
	archive := &Archive{Mirror: opts.Mirror, Cache: opts.Cache, Log: opts.Log}
	defer archive.Close()
	kernels := map[string]kernelPrep{}
	for _, c := range opts.Cells {
		key := strings.Join(c.Kernel.Packages, "+")
		if _, done := kernels[key]; !done {
			kernels[key] = prepareKernel(ctx, archive, c.Kernel, kernelModules(opts.Cells, key), opts.Log)
		}
	}
	wg.Wait()
	if buildErr != nil {
		return m, buildErr
	}
	base, err := baseImage(bins, opts.Tests)
	if err != nil {
		return m, fmt.Errorf("initramfs: %w", err)
	}

	results := make([]Result, len(opts.Cells))
	sem := make(chan struct{}, opts.Parallel)
	for i, c := range opts.Cells {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			k := kernels[strings.Join(c.Kernel.Packages, "+")]
			results[i] = runCell(ctx, c, k, base, opts, filepath.Join(work, c.Name))
			opts.Log("%s: %s", c.Name, results[i].Verdict)
		}()
	}
	wg.Wait()
	m.Results = results
	m.Seconds = time.Since(m.Start).Seconds()
	passed := 0
	for _, r := range results {
		if r.Pass {
			passed++
		}
	}
	m.Summary = fmt.Sprintf("kernel matrix: %d of %d cells passed in %.0f s (%s)", passed, len(results), m.Seconds, m.Accel)
	return m, nil
}

// kernelPrep is a fetched and extracted kernel, or why it is not available.
type kernelPrep struct {
	Files    KernelFiles
	Packages []PackageEntry
	Err      error
}

// kernelModules are the modules the cells booting kernel key load: overlay, and
// the virtual GPU's driver where one of them has a GPU. A cell without a GPU loads
// the driver too, which then finds no device.
func kernelModules(cells []Cell, key string) []string {
	mods := []string{"overlay"}
	for _, c := range cells {
		if c.GPU && strings.Join(c.Kernel.Packages, "+") == key {
			return append(mods, gpuModule)
		}
	}
	return mods
}

// gpuModule drives qemu's virtio-gpu-pci (gpuDevice); its dependencies (drm …)
// come with it.
const (
	gpuModule = "virtio_gpu"
	gpuDevice = "virtio-gpu-pci"
)

func prepareKernel(ctx context.Context, a *Archive, k Kernel, modules []string, logf func(string, ...any)) kernelPrep {
	var p kernelPrep
	var debs []string
	for _, pkg := range k.Packages {
		deb, e, err := a.Fetch(ctx, k.Suite, pkg)
		if err != nil {
			p.Err = fmt.Errorf("fetch %s: %w", pkg, err)
			return p
		}
		debs = append(debs, deb)
		p.Packages = append(p.Packages, e)
	}
	dir := filepath.Join(a.Cache, "extracted", p.Packages[0].Package+"_"+p.Packages[0].Version)
	files, err := extractKernel(ctx, debs, dir, modules)
	if err != nil {
		p.Err = err
		return p
	}
	logf("kernel %s: vmlinuz and %d module(s) ready", files.Release, len(files.Modules))
	p.Files = files
	return p
}

func runCell(ctx context.Context, c Cell, k kernelPrep, base *image, opts Options, dir string) Result {
	r := Result{Cell: c.Name, Why: c.Why, Packages: k.Packages, DoctorExit: -1}
	// no_timer_check: under TCG on a busy host, the IO-APIC timer check can fail
	// and panic the kernel before it starts.
	r.Cmdline = strings.TrimSpace("console=ttyS0 panic=-1 quiet loglevel=1 no_timer_check " + c.Cmdline)
	if k.Err != nil {
		return r.fail(k.Err.Error())
	}
	cfg := vmConfig(c, opts.Tests)
	for _, mod := range k.Files.Modules {
		params := c.ModuleParams[mod.Name]
		cfg.Modules = append(cfg.Modules, vmproto.Module{Name: mod.Name, Path: "/kmatrix/modules/" + mod.Name + ".ko", Params: params})
		r.Modules = append(r.Modules, LoadedModule{mod.Name, params, mod.Compression})
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return r.fail(err.Error())
	}
	initrd := filepath.Join(dir, "initrd.cpio")
	if err := cellImage(base, k.Files, cfg).write(initrd); err != nil {
		return r.fail("initramfs: " + err.Error())
	}
	var console []byte
	for attempt := 1; ; attempt++ {
		var err error
		console, err = bootOnce(ctx, &r, c, k, opts, initrd, filepath.Join(dir, "console.log"))
		if err != nil {
			return r.fail(err.Error())
		}
		// A kernel that never reached the init gets one more boot: under TCG on a
		// loaded host, early boot can trip over timing checks that have nothing
		// to do with agentbox. The first console is kept, and the result says so.
		if r.Booted || attempt == 2 {
			break
		}
		_ = os.Rename(filepath.Join(dir, "console.log"), filepath.Join(dir, "console-1.log"))
		r.Retried = "first boot did not reach the init: " + bootFailure(console)
		r.Problems = nil
	}
	r.Pass = len(r.Problems) == 0
	r.Verdict = r.verdict()
	if !r.Pass {
		r.ConsoleTail = tail(console, 40)
	}
	return r
}

// bootOnce boots the cell's VM once and evaluates its console into r.
func bootOnce(ctx context.Context, r *Result, c Cell, k kernelPrep, opts Options, initrd, logPath string) ([]byte, error) {
	live, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer live.Close()
	start := time.Now()
	spec := vmSpec{
		Kernel: k.Files.Vmlinuz, Initrd: initrd, Cmdline: r.Cmdline,
		MemoryMB: opts.MemoryMB, Timeout: opts.Timeout, Live: live,
	}
	if c.GPU {
		spec.Devices = []string{gpuDevice}
	}
	console, timedOut, vmErr := bootVM(ctx, spec)
	r.Seconds = time.Since(start).Seconds()
	r.evaluate(c, k.Files, parseConsole(console))
	if vmErr != nil {
		r.Problems = append(r.Problems, vmErr.Error())
	}
	if timedOut && r.Completed {
		r.Problems = append(r.Problems, "the VM did not power off after its tests")
	}
	return console, nil
}
