package kmatrix

// Kernel is a Debian kernel, named by the packages that hold it.
type Kernel struct {
	Suite string // the suite whose Packages index lists the packages
	// Packages hold the image and the modules. Up to Debian 13 one
	// linux-image-RELEASE package has both; newer kernels split into
	// linux-binary-RELEASE (vmlinuz) and linux-modules-RELEASE.
	Packages []string
}

// Cell is one VM of the matrix: a kernel and how it is booted.
type Cell struct {
	Name   string
	Kernel Kernel
	// Cmdline is appended to the kernel command line.
	Cmdline string
	// ModuleParams are passed when the named module is loaded.
	ModuleParams map[string]string
	// GPU gives the VM a virtual GPU (qemu's virtio-gpu-pci, the kernel's
	// virtio_gpu driver): a DRM render node, /dev/dri/renderD128, for --gpu.
	GPU bool
	// NativeReady is what doctor must conclude on this cell: the kernel's features
	// are known, so a different verdict is a bug in the probes.
	NativeReady bool
	// Why says what the cell proves.
	Why string
	// DelegateCgroup: the test user runs in a cgroup v2 subtree delegated to it,
	// with the memory, pids and cpu controllers (vmproto.Config.DelegateCgroup).
	DelegateCgroup bool
	// Tests, when set, names the only TestPackages this cell runs.
	Tests []string
}

// Pinned kernels. When Debian drops a pinned ABI from a suite, Fetch fails with the
// candidates that replaced it; update the name here (a cached .deb keeps working).
var (
	Bullseye = Kernel{"bullseye", []string{"linux-image-5.10.0-32-amd64"}}
	Bookworm = Kernel{"bookworm", []string{"linux-image-6.1.0-50-amd64"}}
	Trixie   = Kernel{"trixie", []string{"linux-image-6.12.117+deb13-amd64"}}
	Sid      = Kernel{"sid", []string{"linux-binary-7.2.13+deb14-amd64", "linux-modules-7.2.13+deb14-amd64"}}
)

// DefaultCells is the matrix CI runs.
var DefaultCells = []Cell{
	{Name: "bullseye-5.10", Kernel: Bullseye, NativeReady: false,
		Why: "Debian 11 as installed: no overlayfs in user namespaces, no mount_setattr; agentbox must refuse clearly"},
	{Name: "bullseye-5.10-overlay-permit", Kernel: Bullseye, NativeReady: true,
		ModuleParams: map[string]string{"overlay": "permit_mounts_in_userns=1"},
		Why:          "Debian 11 with the overlay option doctor suggests: works, with the mount_setattr fallback"},
	{Name: "bookworm-6.1", Kernel: Bookworm, NativeReady: true,
		Why: "Debian 12: every required feature; no tmpfs user xattrs, so no opaque directories in the HOME overlay"},
	{Name: "trixie-6.12", Kernel: Trixie, NativeReady: true, GPU: true,
		Why: "Debian 13: every feature; a virtual GPU's render node handed in with --gpu"},
	{Name: "sid-7.x", Kernel: Sid, NativeReady: true,
		Why: "the newest kernel (split linux-binary/linux-modules packages)"},
	{Name: "trixie-6.12-cgroup-delegated", Kernel: Trixie, NativeReady: true, DelegateCgroup: true, Tests: []string{"vmtest"},
		Why: "a cgroup v2 subtree delegated to the user, as systemd does: --memory, --pids and --cpus hold and only the session suffers (every other cell refuses them)"},
	{Name: "trixie-6.12-userns-off", Kernel: Trixie, NativeReady: false,
		Cmdline: "sysctl.kernel.unprivileged_userns_clone=0",
		Why:     "unprivileged user namespaces switched off: agentbox must refuse with doctor's message"},
}

// TestPackage is a package whose tests run inside every VM, built with go test -c.
type TestPackage struct {
	Name    string // the binary's name in results
	Pkg     string // the import path relative to the module root, "./internal/kernel"
	Seconds int    // bound on the run inside the VM
	// Args are passed to the test binary after -test.v (e.g. -test.run=…).
	Args []string
	// NeedsSandbox: the tests start sandboxes, so they run only in cells where
	// agentbox is expected to work (Cell.NativeReady); elsewhere the smoke tests
	// check the refusal.
	NeedsSandbox bool
}

// TestPackages run in each VM, in order. Adding a package is one line here.
//
// Of the behaviour table, the default matrix runs the native backend's rows whose
// mechanics depend on the kernel — the read-only root (mount_setattr or its
// fallback), the HOME overlay, the namespaces, the Git paths resolved without
// following symlinks (openat2 or its fallback), locked read-only mounts, the host's
// path sockets (Landlock's resolve-unix rule on 7.1+, the masks before), the tmpfs
// budget's root detached once its directories are cloned — and the
// nested sandboxes with --nested-sandbox (on 7.1+ the masks, so that bubblewrap
// and unshare -m can mount inside), because the whole table takes minutes per VM
// under TCG. Full (kmatrix -full) runs it all.
var TestPackages = []TestPackage{
	{Name: "kernel", Pkg: "./internal/kernel", Seconds: 60},
	// The seccomp filter loaded into a process by each kernel: what it refuses, on
	// x86_64 and through i386's int $0x80, and the calls of a kernel newer than it
	// (ENOSYS) on the newest cell. The socket families' test is left out: it gates on
	// AF_VSOCK, which doctor does not measure, and the cells have no vsock.
	{Name: "seccomp", Pkg: "./internal/seccomp", Seconds: 60,
		Args: []string{"-test.run=^(TestTTYFilter|TestFilterI386Kernel|TestFilterRefusesNewerCallsKernel)$"}},
	{Name: "vmtest", Pkg: "./kmatrix/vmtest", Seconds: 240},
	// The raw init where the kernel has its system calls (5.12+), its fallback to the
	// Go init where not, and the same failure reports from both.
	{Name: "nsinit", Pkg: "./nsinit", Seconds: 120, NeedsSandbox: true},
	// The compiled plan's own tests: the skip of a vanished cover, the device
	// nodes' rule, on each kernel's openat2 or its walk.
	{Name: "program", Pkg: "./nsinit/program", Seconds: 60},
	// The session end's watch (fanotify with file handles, 5.17+) against a full
	// scan, on each kernel's name_to_handle_at and filesystem; a kernel gate below
	// 5.17.
	{Name: "treewatch", Pkg: "./gitguard/audit", Seconds: 120, Args: []string{"-test.run=^TestSinceSameAsFullScan$"}},
	// The recorder's work-tree Git in its Landlock domain, on each kernel's ABI
	// (skipped, saying so, where there is none), with the kernel's list of a
	// thread's children: the other ways of finding a thread are seams, the same
	// on every kernel, run where go test runs (slow under TCG: three times over,
	// the cell ran out of time).
	{Name: "confine", Pkg: "./shadow", Seconds: 120, Args: []string{"-test.run=^(TestWorkTreeGitReadsOnlyTheRepository|TestConfinedGitKillsNoOtherChild|TestCheckpointNeverStoresAFileOutsideTheRepository)$",
		"-test.skip=^(TestCheckpointNeverStoresAFileOutsideTheRepository|TestConfinedGitKillsNoOtherChild)$/^(no_thread-self_children_file|every_thread_with_children)$"}},
	{Name: "behaviour", Pkg: "./test/behaviour", Seconds: 300, NeedsSandbox: true,
		Args: []string{"-test.run=^(TestPromises|TestNestedSandboxes|TestTmpBudgetMountTable|TestTmpBudgetKernelMemory)$/^native$/^(P1_|P3_HOME|P4_host_path|P5_new|P7_Git_hooks|read-only_mounts)"}},
}

// Full returns the packages with their filters removed and their time bounds
// raised, for a nightly run of everything.
func Full(pkgs []TestPackage) []TestPackage {
	out := make([]TestPackage, len(pkgs))
	for i, p := range pkgs {
		p.Args = nil
		p.Seconds *= 5
		out[i] = p
	}
	return out
}
