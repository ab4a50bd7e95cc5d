// Package vmproto is the contract between the kmatrix host side and the /init it
// puts in each VM's initramfs: the configuration the init reads, and the marker
// lines it prints on the serial console for the host to parse. It is small on
// purpose: the init links it and nothing else of kmatrix.
package vmproto

// ConfigPath is where the init finds its Config inside the initramfs.
const ConfigPath = "/kmatrix/config.json"

// Config tells the init what to do.
type Config struct {
	// Modules are loaded in order with finit_module(2), before anything runs.
	Modules []Module `json:"modules"`
	// User is the unprivileged account every program below runs as.
	User User `json:"user"`
	// Env is the environment of those programs.
	Env []string `json:"env"`
	// Doctor is the argv of `agentbox doctor --json`; its output goes between the
	// "begin doctor" and "end doctor" markers.
	Doctor []string `json:"doctor"`
	// Tests are the test binaries, run in order, each with -test.v.
	Tests []Test `json:"tests"`
}

// Module is a kernel module file and its parameters ("permit_mounts_in_userns=1").
type Module struct {
	Name   string `json:"name"`
	Path   string `json:"path"`
	Params string `json:"params,omitempty"`
}

// User is the unprivileged account.
type User struct {
	Name string `json:"name"`
	UID  int    `json:"uid"`
	GID  int    `json:"gid"`
	Home string `json:"home"`
}

// Test is one test binary built with go test -c.
type Test struct {
	Name    string   `json:"name"`
	Path    string   `json:"path"`
	Args    []string `json:"args,omitempty"`
	Seconds int      `json:"seconds"` // -test.timeout, and the init's own bound
}

// Console markers. Each is printed at the start of a line; everything between
// "begin NAME" and "end NAME STATUS" is the raw output of that program.
const (
	Prefix = "@@kmatrix "
	Kernel = "kernel" // Prefix + "kernel RELEASE"
	Begin  = "begin"  // Prefix + "begin NAME"
	End    = "end"    // Prefix + "end NAME EXITSTATUS"
	Error  = "error"  // Prefix + "error MESSAGE": the init itself failed at a step
	Done   = "done"   // Prefix + "done": everything ran; power-off follows
	Doctor = "doctor" // the NAME of the doctor run
)

// KernelGate starts the reason of the one skip a test may take inside a VM
// (testenv.SkipKernel, whose testenv.KernelGate is this): "kernel lacks FEATURE: why", FEATURE one of doctor's check
// names. The host fails the cell when doctor found FEATURE present there.
const KernelGate = "kernel lacks "
