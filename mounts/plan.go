// Package mounts holds the sandbox's mount plan: an ordered list of operations built
// by one function from a policy. The native backend executes it with system calls,
// the bwrap backend translates it to bwrap options; neither decides what is
// protected. The vocabulary is limited to what both backends can express.
package mounts

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/agentbox/agentbox/netproxy"
	"github.com/agentbox/agentbox/policy"
)

// Kind is the type of one mount operation.
type Kind string

// The operations. Sources are host paths, resolved in the host's view before any
// operation runs; destinations are paths in the sandbox as earlier operations left it.
const (
	// BindRO binds Source read-only, recursively, at Dest. With Source and Dest both
	// "/" it makes the whole host tree read-only.
	BindRO Kind = "ro-bind"
	// Bind binds Source writable, recursively, at Dest.
	Bind Kind = "bind"
	// Tmpfs mounts an empty tmpfs with permissions Mode at Dest, which draws on the
	// plan's TmpSize.
	Tmpfs Kind = "tmpfs"
	// Overlay mounts an overlay at Dest whose lower layer is Source and whose upper
	// layer is a fresh tmpfs that vanishes with the sandbox and draws on the plan's
	// TmpSize.
	Overlay Kind = "overlay"
	// Proc mounts a proc filesystem for the sandbox's PID namespace at Dest.
	Proc Kind = "proc"
	// Dev mounts a minimal /dev at Dest: null, zero, full, random, urandom, tty from
	// the host, a private devpts and a private shm; /dev and its shm draw on the
	// plan's TmpSize.
	Dev Kind = "dev"
	// ReadOnly makes Dest read-only: the sandbox's /proc itself (the Dest of an
	// earlier Proc), or a kernel-global path below it. Dest is bound onto itself and
	// the bind made read-only; a Dest the kernel does not have is skipped. A backend
	// that can bind only host paths (bwrap) remounts a mount point of the plan, and
	// binds the host's Dest for a path below one (the same kernel's files whatever
	// proc instance shows them).
	ReadOnly Kind = "remount-ro"
	// Mask hides Dest, a kernel-global path below /proc or /sys: a directory is covered by
	// an empty read-only tmpfs, anything else by the null device, read-only. A Dest
	// the kernel does not have is skipped.
	Mask Kind = "mask"
)

// Kinds lists every operation kind; tests walk it through both backends.
var Kinds = []Kind{BindRO, Bind, Tmpfs, Overlay, Proc, Dev, ReadOnly, Mask}

// What a sandbox whose uid or gid is the host's 0 could write by file mode alone
// (the kernel asks no capability: proc_sys_permission and sysrq's write check only
// the owner's bits). systemd's ProtectKernelTunables= and the OCI runtime spec's
// default readonlyPaths (runc) name /proc/sys, /proc/sysrq-trigger, /proc/irq,
// /proc/bus and /proc/fs; the whole of /proc is made read-only instead, because the
// host network namespace's per-process /proc/PID/net entries (xt_recent lists, the
// sunrpc caches' channels) are guarded the same way and cannot be covered one by one.
// A root session loses only writes to its own /proc/PID files.
var readOnlyPaths = []string{"/proc"}

// Files that give a host-root sandbox what a user cannot read or write: the OCI
// default maskedPaths (kernel memory, other users' key names, the host's timers and
// scheduler state, ACPI wakeup and SCSI control, firmware tables, energy counters),
// plus the physical page maps (/proc/kpage*, a Rowhammer aid).
var maskedPaths = []string{
	"/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list",
	"/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/proc/kpagecount",
	"/proc/kpageflags", "/proc/kpagecgroup", "/sys/firmware", "/sys/devices/virtual/powercap",
}

// Op is one mount operation.
type Op struct {
	Kind   Kind   `json:"op"`
	Source string `json:"source,omitempty"`
	Dest   string `json:"dest"`
	Mode   uint32 `json:"mode,omitempty"` // Tmpfs: permission bits of its root
	Why    string `json:"why"`            // the promise this operation keeps
	// SourceID is the identity the launcher verified the source has, right before
	// the launch (the repository, each protected Git path); a backend refuses a
	// source it opens with another. Zero: not checked.
	SourceID FileID `json:"source_id,omitzero"`
	// IfExists (BindRO): a Dest that is gone by the time the backend gets to it is
	// skipped rather than failing the launch — the "try" bit bubblewrap puts on an
	// op, for the destination. Only for a cover of something that may vanish
	// without harm (a host socket removed by its owner: a cover of nothing protects
	// nothing), never for a protected path, whose absence must stop the launch.
	IfExists bool `json:"if_exists,omitempty"`
}

// FileID is a file's identity: its device and inode numbers.
type FileID struct {
	Dev uint64 `json:"dev"`
	Ino uint64 `json:"ino"`
}

func (o Op) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-8s", o.Kind)
	if o.Source != "" && o.Source != o.Dest {
		fmt.Fprintf(&b, " %s ->", o.Source)
	}
	fmt.Fprintf(&b, " %s", o.Dest)
	if o.Mode != 0 {
		fmt.Fprintf(&b, " mode=%04o", o.Mode)
	}
	if o.IfExists {
		b.WriteString(" (if it exists)")
	}
	if o.Why != "" {
		fmt.Fprintf(&b, "  # %s", o.Why)
	}
	return b.String()
}

// Namespaces says which namespaces the sandbox gets. User, mount, PID, IPC, UTS and
// cgroup are always new (P5); Net with --offline and with --allow-net.
type Namespaces struct {
	Net bool `json:"net"`
}

// Plan is the whole sandbox: the mount operations in order, the namespaces, and where
// and what to run. It is plain data, sent whole to the native init and translated
// whole to bwrap options.
type Plan struct {
	Ops        []Op       `json:"ops"`
	Namespaces Namespaces `json:"namespaces"`
	Workdir    string     `json:"workdir"`
	Command    []string   `json:"command"`
	// Proxy (--allow-net) is the address inside the new network namespace where
	// the init creates a listening socket and hands it to the launcher, whose proxy
	// serves it: the namespace's only way out. Empty: none.
	Proxy string `json:"proxy,omitempty"`
	// HostPorts (--host-port): the init creates a listening socket at
	// 127.0.0.1:Inside in the new network namespace for each and hands them to the
	// launcher with the proxy's, which relays each connection to the host's
	// 127.0.0.1:Host.
	HostPorts []policy.PortMap `json:"host_ports,omitempty"`
	// Publish (--publish): the launcher listens on the host's 127.0.0.1:Host and
	// relays each connection to 127.0.0.1:Inside in the new network namespace,
	// through a socket the init creates there on the launcher's request.
	Publish []policy.PortMap `json:"publish,omitempty"`
	// Env are variables the command gets on top of its environment, replacing
	// those of the same name (the proxy's).
	Env []string `json:"env,omitempty"`
	// ScopeAbstractUnix (P4): the command is put in a Landlock domain scoped
	// against abstract Unix sockets (kernel.LandlockScopeAbstractUnix). Abstract sockets
	// belong to the network namespace, not the file system, so without a new one
	// the host's are reachable: X11's @/tmp/.X11-unix/X0 (which types into any of
	// the operator's windows), D-Bus buses, systemd's and others' control sockets.
	// Set when the kernel has Landlock ABI 6 (Linux 6.12).
	ScopeAbstractUnix bool `json:"scope_abstract_unix,omitempty"`
	// TmpSize bounds the RAM-backed filesystems the sandbox can write (every Tmpfs,
	// Dev's /dev and /dev/shm, the Overlay's upper layer), in bytes: the native
	// backend makes them directories of one tmpfs of this size, so that together
	// they hold no more; bwrap, which cannot share one, gives each tmpfs it can
	// size this size (docs/usage.md). 0: no size, the kernel's default (half of RAM).
	TmpSize int64 `json:"tmp_size,omitempty"`
	// DenyPathSockets (P4): the command's Landlock domain handles
	// LANDLOCK_ACCESS_FS_RESOLVE_UNIX (kernel.LandlockAccessFSResolveUnix): it
	// cannot connect to a path socket made outside the domain unless the socket
	// lies beneath one of PathSocketGrants — whenever the daemon bound it and in
	// whichever network namespace. No socket is masked then (Session.MaskSockets).
	// Set when the kernel has Landlock ABI 9 (Linux 7.1).
	DenyPathSockets bool `json:"deny_path_sockets,omitempty"`
	// PathSocketGrants are where the command may reach sockets made outside it:
	// the handed-in sockets (--allow-socket) and the session's writable
	// directories (pathSocketGrants).
	PathSocketGrants []string `json:"path_socket_grants,omitempty"`
}

// Writable lists the host directories the sandbox can write: the sources of the
// writable binds (the repository, a linked worktree's metadata, the --disk-tmp
// directory). The launcher runs nothing found in them (policy.LookPath).
func (p Plan) Writable() []string {
	var out []string
	for _, op := range p.Ops {
		if op.Kind == Bind && op.Source != "" {
			out = append(out, op.Source)
		}
	}
	return out
}

// ProxyAddr is where the proxy listens inside the sandbox (Plan.Proxy).
const ProxyAddr = "127.0.0.1:3128"

// Served reports whether the launcher serves the sandbox's network namespace from
// outside (the proxy, --host-port, --publish): the Go init, which creates the
// sockets, runs then.
func (p Plan) Served() bool {
	return p.Proxy != "" || len(p.HostPorts) > 0 || len(p.Publish) > 0
}

// String renders the plan for --dry-run, one operation per line in order.
func (p Plan) String() string {
	var b strings.Builder
	for _, op := range p.Ops {
		b.WriteString(op.String())
		b.WriteByte('\n')
	}
	ns := "user mount pid ipc uts cgroup"
	if p.Namespaces.Net {
		ns += " net"
	}
	if p.TmpSize > 0 {
		fmt.Fprintf(&b, "budget   %s  # --tmp-size: the RAM-backed filesystems hold at most this (native: together; bwrap: each sized tmpfs)\n", policy.FormatSize(p.TmpSize))
	}
	fmt.Fprintf(&b, "unshare  %s\n", ns)
	if p.ScopeAbstractUnix {
		b.WriteString("landlock scope abstract-unix  # P4 the host's abstract Unix sockets unreachable\n")
	}
	b.WriteString(p.PathSocketsLine() + "\n")
	if p.Proxy != "" {
		fmt.Fprintf(&b, "proxy    %s  # --allow-net: the launcher's proxy, the only way out\n", p.Proxy)
	}
	for _, m := range p.HostPorts {
		fmt.Fprintf(&b, "forward  127.0.0.1:%d -> host 127.0.0.1:%d  # --host-port: relayed by the launcher\n", m.Inside, m.Host)
	}
	for _, m := range p.Publish {
		fmt.Fprintf(&b, "publish  host 127.0.0.1:%d -> 127.0.0.1:%d  # --publish: relayed by the launcher\n", m.Host, m.Inside)
	}
	for _, e := range p.Env {
		fmt.Fprintf(&b, "env      %s\n", e)
	}
	fmt.Fprintf(&b, "chdir    %s\n", p.Workdir)
	fmt.Fprintf(&b, "exec     %s\n", strings.Join(p.Command, " "))
	return b.String()
}

// JSON renders the plan for --dry-run --json.
func (p Plan) JSON() ([]byte, error) {
	return json.MarshalIndent(p, "", "  ")
}

// Protected is one path of Git's exec surface that lies inside the writable set and
// must be read-only in the sandbox. gitguard.ProtectedPaths finds them; Build alone
// turns them into operations (the last ones, so they win).
type Protected struct {
	Path   string // absolute host path, inside the repository, free of symlinks
	Dir    bool   // a directory (hooks/) rather than a file
	Exists bool   // false: a placeholder is created before launch so it can be covered
}

// Session holds what the launcher prepared for one run, on top of the policy.
type Session struct {
	DiskTmp   string       // --disk-tmp: the session's directory for /tmp
	GitRW     []Op         // writable binds of a linked worktree's metadata outside the repo
	Pinned    []string     // directories bound onto themselves so they cannot be renamed (gitguard.PinnedDirs)
	ExtraRO   []Op         // further read-only binds (the push guard's tools)
	Protected []Protected  // Git exec surface inside the writable set (gitguard.ProtectedPaths)
	Empty     EmptySources // stand-ins for hidden paths (hide.go)
	// HostRoot: the sandbox's uid or gid is the host's 0 (agentbox started as root;
	// the ids map to themselves). The kernel then lets the command write kernel
	// tunables by file mode alone, capabilities or not, so Build covers them (P12).
	HostRoot bool
	// ScopeAbstractUnix: the kernel can keep the command off the host's abstract
	// Unix sockets (kernel.CanScopeAbstractUnix); Build puts it in the plan.
	ScopeAbstractUnix bool
	// DenyPathSockets: the kernel can keep the command off every path socket made
	// outside it but the granted ones (kernel.CanDenyPathSockets); Build puts it in
	// the plan, with its grants, and MaskSockets is then empty.
	DenyPathSockets bool
	// MaskSockets are host path sockets on the read-only view (outside /tmp, /run,
	// HOME and the writable directories) that the sandbox must not reach (P4): a
	// daemon's socket is a host process. Each gets MaskSource bound over it.
	MaskSockets []string
	// SourceIDs are the identities the launcher saw, right before the launch, for
	// the sources it rechecked (the repository, protected Git paths, kept and added
	// directories); Build puts each on every bind of that source (Op.SourceID).
	SourceIDs map[string]FileID
}

// MaskSource is what is bound over a host socket to mask it (Session.MaskSockets):
// the host's null device, which every uid can open along a searchable path (a root
// session's uid 0 has no capability over another user's cache, where the hidden
// paths' stand-ins live). A connect(2) to it is refused; it reads empty.
const MaskSource = "/dev/null"

// IsHostRoot reports whether a sandbox started by this process gets the host's uid
// or gid 0: both backends map the launcher's ids to themselves (Session.HostRoot).
func IsHostRoot() bool {
	return os.Getuid() == 0 || os.Getgid() == 0
}

// hostRootCovers are the operations that keep a host-root sandbox off the kernel's
// tunables. Only a host-root sandbox gets them: a user's sandbox cannot write them
// anyway, and a locked mount over a non-empty part of /proc makes the kernel refuse
// a nested unprivileged proc mount (fs/namespace.c, mount_too_revealing), which
// agents' own sandboxes (bwrap --proc, unshare --mount-proc) need. For host root that
// refusal is wanted: a fresh proc would show /proc/sys writable again. bubblewrap
// decides the same way (its /proc covers apply when the path is writable).
func hostRootCovers() []Op {
	var ops []Op
	for _, p := range readOnlyPaths {
		ops = append(ops, Op{Kind: ReadOnly, Dest: p, Why: "P12 kernel tunables read-only for host root"})
	}
	for _, p := range maskedPaths {
		ops = append(ops, Op{Kind: Mask, Dest: p, Why: "P12 kernel interface masked for host root"})
	}
	return ops
}

// Build returns the mount plan for a policy. It is the only place that orders mounts:
//
//  1. "/" read-only, recursively (P1);
//  2. private /proc and /dev for the new namespaces (P5); for a host-root sandbox,
//     /proc read-only (the kernel's tunables and triggers) and the kernel's secrets
//     masked (P12);
//  3. private /tmp and /run (P4, P10);
//  4. the HOME overlay (P3), after /tmp so that a HOME below /tmp stays overlaid;
//  5. kept paths (--keep, --keep-agent) writable over the HOME overlay, then the
//     read-only directories inside them (keep.go); none contains or lies in the
//     repository (policy), so the order with it does not matter;
//  6. the repository writable (P2), after /tmp, /run and HOME so that a repository
//     below any of them stays reachable at its own path (P6);
//  7. a linked worktree's Git metadata writable (it lives outside the repo);
//  8. the directories above protected paths bound onto themselves, so that none can
//     be renamed away with its read-only mounts inside (P7);
//  9. extra read-only binds (the push guard), then hidden paths (empty stand-ins
//     bound read-only over them, after every writable bind that could hold them),
//     then the handed-in sockets (socket.go);
//  10. the protected Git paths read-only, last, so they win over every writable bind (P7).
func Build(p *policy.Policy, s Session) Plan {
	ops := []Op{
		{Kind: BindRO, Source: "/", Dest: "/", Why: "P1 host read-only"},
		{Kind: Proc, Dest: "/proc", Why: "P5 proc of the new PID namespace"},
		{Kind: Dev, Dest: "/dev", Why: "P5 minimal private /dev"},
	}
	if s.HostRoot {
		ops = append(ops, hostRootCovers()...)
	}
	if s.DiskTmp != "" {
		ops = append(ops, Op{Kind: Bind, Source: s.DiskTmp, Dest: "/tmp", Why: "P10 private /tmp on disk"})
	} else {
		ops = append(ops, Op{Kind: Tmpfs, Dest: "/tmp", Mode: 01777, Why: "P4 private /tmp"})
	}
	ops = append(ops, Op{Kind: Tmpfs, Dest: "/run", Mode: 0755, Why: "P4 private /run"})
	if p.Home != "" {
		ops = append(ops, Op{Kind: Overlay, Source: p.Home, Dest: p.Home, Why: "P3 disposable HOME"})
		ops = append(ops, keptOps(p)...)
	}
	if p.ReadOnly {
		// --read-only: a review session; nothing in the repository is writable, so
		// there is nothing to pin or protect (the launcher passes no Git ops).
		if policy.Within(p.Repo, "/tmp") || policy.Within(p.Repo, "/run") {
			// The private /tmp or /run has no mount point for it, and only a writable
			// bind creates one (every backend): covered at once by the read-only
			// bind, before anything of the sandbox runs (as for sockets).
			ops = append(ops, Op{Kind: Bind, Source: p.Repo, Dest: p.Repo, Why: "mount point for the read-only repository, covered by the next op"})
		}
		ops = append(ops, Op{Kind: BindRO, Source: p.Repo, Dest: p.Repo, Why: "P2 repository read-only (--read-only)"})
	} else {
		ops = append(ops, Op{Kind: Bind, Source: p.Repo, Dest: p.Repo, Why: "P2 writable repository"})
	}
	for _, d := range p.AddDirs {
		ops = append(ops, Op{Kind: Bind, Source: d, Dest: d, Why: "P2 further writable directory (--add-dir)"})
	}
	ops = append(ops, s.GitRW...)
	for _, d := range s.Pinned {
		ops = append(ops, Op{Kind: Bind, Source: d, Dest: d, Why: "P7 pinned: cannot be renamed"})
	}
	ops = append(ops, s.ExtraRO...)
	ops = append(ops, hiddenOps(p, s.Empty)...)
	for _, sock := range s.MaskSockets {
		// A socket removed between this list and the mount (by its daemon, or by
		// another session's sandbox in its own directory) is skipped: failing
		// the launch let one session stop another's.
		ops = append(ops, Op{Kind: BindRO, Source: MaskSource, Dest: sock, Why: "P4 host socket unreachable", IfExists: true})
	}
	ops = append(ops, socketOps(p)...)
	for _, g := range s.Protected {
		ops = append(ops, Op{Kind: BindRO, Source: g.Path, Dest: g.Path, Why: "P7 Git exec surface"})
	}
	for i, op := range ops {
		if id, ok := s.SourceIDs[op.Source]; ok && (op.Kind == Bind || op.Kind == BindRO) {
			ops[i].SourceID = id
		}
	}
	plan := Plan{
		Ops:        ops,
		Namespaces: Namespaces{Net: p.Offline || len(p.AllowNet) > 0},
		Workdir:    p.Workdir,
		Command:    p.Command,
		// A new network namespace has no host abstract socket in it; the scope
		// costs nothing there and keeps a nested one honest too.
		ScopeAbstractUnix: s.ScopeAbstractUnix,
		TmpSize:           p.TmpSize,
	}
	if s.DenyPathSockets {
		plan.DenyPathSockets, plan.PathSocketGrants = true, pathSocketGrants(p, s)
	}
	if len(p.AllowNet) > 0 {
		plan.Proxy, plan.Env = ProxyAddr, netproxy.Env(ProxyAddr)
	}
	if plan.Namespaces.Net {
		plan.HostPorts, plan.Publish = p.HostPorts, p.Publish
	}
	return plan
}
