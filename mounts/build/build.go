// Package build makes the mount plan (package mounts) from a policy and what the
// launcher prepared for the session (mounts.Session). It is the only place that
// orders mounts; the backends execute or translate the plan and decide nothing.
package build

import (
	"github.com/agentbox/agentbox/internal/hostpath"
	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/netproxy"
	"github.com/agentbox/agentbox/policy"
)

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

// hostRootCovers are the operations that keep a host-root sandbox off the kernel's
// tunables. Only a host-root sandbox gets them: a user's sandbox cannot write them
// anyway, and a locked mount over a non-empty part of /proc makes the kernel refuse
// a nested unprivileged proc mount (fs/namespace.c, mount_too_revealing), which
// agents' own sandboxes (bwrap --proc, unshare --mount-proc) need. For host root that
// refusal is wanted: a fresh proc would show /proc/sys writable again. bubblewrap
// decides the same way (its /proc covers apply when the path is writable).
func hostRootCovers() []mounts.Op {
	var ops []mounts.Op
	for _, p := range readOnlyPaths {
		ops = append(ops, mounts.Op{Kind: mounts.ReadOnly, Dest: p, Why: "P12 kernel tunables read-only for host root"})
	}
	for _, p := range maskedPaths {
		ops = append(ops, mounts.Op{Kind: mounts.Mask, Dest: p, Why: "P12 kernel interface masked for host root"})
	}
	return ops
}

// Plan returns the mount plan for a policy. It is the only place that orders mounts:
//
//  1. "/" read-only, recursively (P1);
//  2. private /proc and /dev for the new namespaces (P5), the handed-in devices
//     in that /dev; for a host-root sandbox,
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
//     Then the operator's start-up files that lie in a writable grant, read-only
//     with the directories on their way pinned (startupOps), before anything is
//     bound inside them (a bind of a directory would cover what was);
//  9. extra read-only binds (the push guard), then hidden paths (empty stand-ins
//     bound read-only over them, after every writable bind that could hold them),
//     then the handed-in sockets (socket.go);
//  10. the protected Git paths read-only, last, so they win over every writable bind (P7).
func Plan(p *policy.Policy, s mounts.Session) mounts.Plan {
	ops := []mounts.Op{
		{Kind: mounts.BindRO, Source: "/", Dest: "/", Why: "P1 host read-only"},
		{Kind: mounts.Proc, Dest: "/proc", Why: "P5 proc of the new PID namespace"},
		{Kind: mounts.Dev, Dest: "/dev", Why: "P5 minimal private /dev"},
	}
	for _, d := range p.Devices {
		ops = append(ops, mounts.Op{Kind: mounts.Device, Source: d.Path, Dest: d.Path, Why: "device handed in (" + d.From + ")"})
	}
	if s.HostRoot {
		ops = append(ops, hostRootCovers()...)
	}
	if s.DiskTmp != "" {
		ops = append(ops, mounts.Op{Kind: mounts.Bind, Source: s.DiskTmp, Dest: "/tmp", Why: "P10 private /tmp on disk"})
	} else {
		ops = append(ops, mounts.Op{Kind: mounts.Tmpfs, Dest: "/tmp", Mode: 01777, Why: "P4 private /tmp"})
	}
	ops = append(ops, mounts.Op{Kind: mounts.Tmpfs, Dest: "/run", Mode: 0755, Why: "P4 private /run"})
	if p.Home != "" {
		ops = append(ops, mounts.Op{Kind: mounts.Overlay, Source: p.Home, Dest: p.Home, Why: "P3 disposable HOME"})
		ops = append(ops, keptOps(p)...)
	}
	if p.ReadOnly {
		// --read-only: a review session; nothing in the repository is writable, so
		// there is nothing to pin or protect (the launcher passes no Git ops).
		if hostpath.Within(p.Repo, "/tmp") || hostpath.Within(p.Repo, "/run") {
			// The private /tmp or /run has no mount point for it, and only a writable
			// bind creates one (every backend): covered at once by the read-only
			// bind, before anything of the sandbox runs (as for sockets).
			ops = append(ops, mounts.Op{Kind: mounts.Bind, Source: p.Repo, Dest: p.Repo, Why: "mount point for the read-only repository, covered by the next op"})
		}
		ops = append(ops, mounts.Op{Kind: mounts.BindRO, Source: p.Repo, Dest: p.Repo, Why: "P2 repository read-only (--read-only)"})
	} else {
		ops = append(ops, mounts.Op{Kind: mounts.Bind, Source: p.Repo, Dest: p.Repo, Why: "P2 writable repository"})
	}
	for _, d := range p.AddDirs {
		ops = append(ops, mounts.Op{Kind: mounts.Bind, Source: d, Dest: d, Why: "P2 further writable directory (--add-dir)"})
	}
	ops = append(ops, s.GitRW...)
	for _, d := range s.Pinned {
		ops = append(ops, mounts.Op{Kind: mounts.Bind, Source: d, Dest: d, Why: "P7 pinned: cannot be renamed"})
	}
	ops = append(ops, startupOps(p)...)
	ops = append(ops, s.ExtraRO...)
	ops = append(ops, hiddenOps(p, s.Empty)...)
	for _, sock := range s.MaskSockets {
		// A socket removed between this list and the mount (by its daemon, or by
		// another session's sandbox in its own directory) is skipped: failing
		// the launch let one session stop another's.
		ops = append(ops, mounts.Op{Kind: mounts.BindRO, Source: mounts.MaskSource, Dest: sock, Why: "P4 host socket unreachable", IfExists: true})
	}
	ops = append(ops, socketOps(p)...)
	for _, g := range s.Protected {
		if g.Copy != "" {
			ops = append(ops, mounts.Op{Kind: mounts.BindRO, Source: g.Copy, Dest: g.Path, Why: "P7 Git exec surface, P11 a copy without its credentials (--hide-secrets)"})
			continue
		}
		ops = append(ops, mounts.Op{Kind: mounts.BindRO, Source: g.Path, Dest: g.Path, Why: "P7 Git exec surface"})
	}
	for i, op := range ops {
		if id, ok := s.SourceIDs[op.Source]; ok && (op.Kind == mounts.Bind || op.Kind == mounts.BindRO || op.Kind == mounts.Device) {
			ops[i].SourceID = id
		}
	}
	plan := mounts.Plan{
		Ops:        ops,
		Namespaces: mounts.Namespaces{Net: p.Offline || len(p.AllowNet) > 0},
		Workdir:    p.Workdir,
		Command:    p.Command,
		// A new network namespace has no host abstract socket in it; the scope
		// costs nothing there and keeps a nested one honest too.
		ScopeAbstractUnix: s.ScopeAbstractUnix,
		TmpSize:           p.TmpSize,
		UserLimits:        s.UserLimits,
		PtyMax:            s.PtyMax,
	}
	// A new network namespace confines only some socket families (AF_VSOCK
	// ignores it): the seccomp filter keeps the command to those.
	plan.ConfineSockets = plan.Namespaces.Net
	if s.DenyPathSockets {
		plan.DenyPathSockets, plan.PathSocketGrants = true, pathSocketGrants(p)
	}
	if len(p.AllowNet) > 0 {
		plan.Proxy, plan.Env = mounts.ProxyAddr, netproxy.Env(mounts.ProxyAddr)
	}
	if plan.Namespaces.Net {
		plan.HostPorts, plan.Publish = forwards(p.HostPorts), forwards(p.Publish)
	}
	return plan
}

// forwards are the policy's forwardings as the plan holds them.
func forwards(ms []policy.PortMap) []mounts.Forward {
	var out []mounts.Forward
	for _, m := range ms {
		out = append(out, mounts.Forward{Inside: m.Inside, Host: m.Host})
	}
	return out
}

// startupOps pins the directories between a writable grant and each start-up file
// in it, then binds the file read-only (policy.StartupFile): the operator's next
// shell or agent runs it, and a rename of it or of a directory on its way fails
// with EBUSY.
func startupOps(p *policy.Policy) []mounts.Op {
	var ops []mounts.Op
	pinned := map[string]bool{}
	for _, f := range p.Startup {
		for _, d := range f.Pins {
			if !pinned[d] {
				pinned[d] = true
				ops = append(ops, mounts.Op{Kind: mounts.Bind, Source: d, Dest: d, Why: "pinned on the way to " + f.Named + ": cannot be renamed"})
			}
		}
	}
	for _, f := range p.Startup {
		ops = append(ops, mounts.Op{Kind: mounts.BindRO, Source: f.Path, Dest: f.Path, Why: "start-up file " + f.Named + " read-only: the next shell or agent runs it"})
	}
	return ops
}
