// Package mounts holds the sandbox's mount plan: an ordered list of operations built
// by one function from a policy (package mounts/build). The native backend executes it with system calls,
// the bwrap backend translates it to bwrap options; neither decides what is
// protected. The vocabulary is limited to what both backends can express.
package mounts

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/agentbox/agentbox/internal/bytesize"
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
	// Device binds the host character device Source at Dest, the same path below
	// the private /dev (--device, --gpu), with device access; its parent
	// directories are made in that /dev. The node is opened without following a
	// symlink and must have SourceID, which the launcher saw it with.
	Device Kind = "dev-bind"
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
var Kinds = []Kind{BindRO, Bind, Tmpfs, Overlay, Proc, Dev, Device, ReadOnly, Mask}

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
	HostPorts []Forward `json:"host_ports,omitempty"`
	// Publish (--publish): the launcher listens on the host's 127.0.0.1:Host and
	// relays each connection to 127.0.0.1:Inside in the new network namespace,
	// through a socket the init creates there on the launcher's request.
	Publish []Forward `json:"publish,omitempty"`
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
	// they hold no more; so does the bwrap backend, mounting that tmpfs before
	// bwrap starts, and making bwrap's own /dev, which it cannot size, read-only
	// (compat/budget.go). 0: no size, the kernel's default (half of RAM).
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
	// ConfineSockets: the command's seccomp filter lets it create sockets only of
	// the address families the new network namespace confines (AF_UNIX, AF_INET,
	// AF_INET6, AF_NETLINK, AF_PACKET; others fail with EAFNOSUPPORT) and refuses
	// socketcall and io_uring_setup, which would hide a socket's family from it.
	// Without it AF_VSOCK, which no network namespace scopes, reaches the
	// hypervisor and the host's vsock services past --offline and --allow-net.
	// Set with Namespaces.Net (internal/seccomp, docs/network.md).
	ConfineSockets bool `json:"confine_sockets,omitempty"`
	// UserLimits lower the sandbox user namespace's own limits on the user's
	// per-user kernel counts (inotify, fanotify, namespaces), and the resource
	// limits counted per user, before the command starts: every backend writes the
	// first while it still holds CAP_SYS_RESOURCE there, and sets the others on the
	// process the command descends from (userlimits.go). Session.UserLimits.
	UserLimits []UserLimit `json:"user_limits,omitempty"`
	// PtyMax bounds the terminals (pty pairs) the sandbox's own devpts instance
	// holds (its max= option; the native init mounts it so, under bwrap the stage).
	// Every devpts but the host's initial one draws on one pool, kernel.pty.max less
	// kernel.pty.reserve, shared with other sessions and containers: without a bound
	// one session could take it all. Session.PtyMax; 0: no bound.
	PtyMax int64 `json:"pty_max,omitempty"`
}

// Writable lists the host directories the sandbox can write: the sources of the
// writable binds (the repository, a linked worktree's metadata, the --disk-tmp
// directory). The launcher runs nothing found in them (hostpath.LookPath).
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

// Forward is one --host-port or --publish forwarding (policy.PortMap): TCP between
// 127.0.0.1:Inside in the sandbox's network namespace and 127.0.0.1:Host on the host.
type Forward struct {
	Inside int `json:"inside"`
	Host   int `json:"host"`
}

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
		fmt.Fprintf(&b, "budget   %s  # --tmp-size: the RAM-backed filesystems hold at most this together\n", bytesize.Format(p.TmpSize))
	}
	fmt.Fprintf(&b, "unshare  %s\n", ns)
	if l := p.UserLimitsLine(); l != "" {
		b.WriteString(l + "\n")
	}
	if p.ScopeAbstractUnix {
		b.WriteString("landlock scope abstract-unix  # P4 the host's abstract Unix sockets unreachable\n")
	}
	b.WriteString(p.PathSocketsLine() + "\n")
	if p.ConfineSockets {
		b.WriteString("seccomp  sockets unix inet inet6 netlink packet; no socketcall, io_uring  # the families the network namespace confines\n")
	}
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
// must be read-only in the sandbox. gitguard.ProtectedPaths finds them; build.Plan alone
// turns them into operations (the last ones, so they win).
type Protected struct {
	Path   string // absolute host path, inside the repository, free of symlinks
	Dir    bool   // a directory (hooks/) rather than a file
	Exists bool   // false: a placeholder is created before launch so it can be covered
	// Copy: a Git config file that holds a credential, under --hide-secrets: the
	// copy without it (policy.GitConfigCopy, in the operator's cache) is bound
	// read-only over Path in the place of Path itself, so the session can write it
	// neither way and reads no credential.
	Copy string
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
	// tunables by file mode alone, capabilities or not, so build.Plan covers them (P12).
	HostRoot bool
	// ScopeAbstractUnix: the kernel can keep the command off the host's abstract
	// Unix sockets (kernel.CanScopeAbstractUnix); build.Plan puts it in the plan.
	ScopeAbstractUnix bool
	// DenyPathSockets: the kernel can keep the command off every path socket made
	// outside it but the granted ones (kernel.CanDenyPathSockets); build.Plan puts it in
	// the plan, with its grants, and MaskSockets is then empty.
	DenyPathSockets bool
	// MaskSockets are host path sockets on the read-only view (outside /tmp, /run,
	// HOME and the writable directories) that the sandbox must not reach (P4): a
	// daemon's socket is a host process. Each gets MaskSource bound over it.
	MaskSockets []string
	// SourceIDs are the identities the launcher saw, right before the launch, for
	// the sources it rechecked (the repository, protected Git paths, kept and added
	// directories); build.Plan puts each on every bind of that source (Op.SourceID).
	SourceIDs map[string]FileID
	// UserLimits are the session's share of the host's per-user kernel counts
	// (internal/ucounts); build.Plan puts them in the plan.
	UserLimits []UserLimit
	// PtyMax is the session's share of the machine's pty pool (internal/ucounts);
	// build.Plan puts it in the plan.
	PtyMax int64
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
