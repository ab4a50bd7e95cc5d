// Package ucounts decides a session's share of the launching user's per-user kernel
// counts: inotify instances and watches, fanotify groups and marks, user, mount,
// PID, IPC, UTS, network, cgroup and time namespaces, and the processes, queued
// signals, message-queue bytes and locked memory of four resource limits. The kernel
// counts each per user at every level of the user-namespace tree, the host's
// included (and pinned memory once per user for the whole machine, against the
// caller's RLIMIT_MEMLOCK), so without a limit of its own a session could take the
// user's whole host allowance: the operator's editor, file watchers and systemd
// --user would then fail with EMFILE, ENOSPC or ENOMEM, and every other launch with
// them. The sandbox's root lowers its user namespace's limits, and the init its
// resource limits, to the share (mounts.Plan.UserLimits) before the command; a
// namespace nested inside cannot raise them, as the kernel checks every level up. So
// too the session's devpts and the machine's one pool of terminals (PtyMax).
//
// It reads the host's limits and computes; it writes nothing.
package ucounts

// Divisor: a session may hold a quarter of each of the user's host limits. Three
// sessions at once then leave the host a quarter (32 inotify instances of the
// default 128) for the user's own programs and for every launcher's own watch
// (one fanotify group and a mark per directory of its repository).
const Divisor = 4

// Share is a session's part of a host limit: a Divisor-th, at least 1 where the
// host allows any, so that a tiny limit still lets the session have one.
func Share(host int64) int64 {
	switch {
	case host <= 0:
		return 0
	case host < Divisor:
		return 1
	}
	return host / Divisor
}

// MemlockFloor is the locked memory a session gets at least, when the user's
// RLIMIT_MEMLOCK allows twice as much: gpg locks 64 KiB of secure memory and warns
// "using insecure memory" when mlock fails (measured: 2.2.40 warns at 60 KiB, not
// at 64). A quarter of the 64 KiB kernels before 5.16 default to is 16 KiB.
const MemlockFloor = 64 << 10

// MemlockShare is a session's RLIMIT_MEMLOCK for the user's soft limit host: Share
// of it, raised to MemlockFloor where that is at most half of it, so that the
// user's host programs keep at least half.
func MemlockShare(host int64) int64 {
	return max(Share(host), min(MemlockFloor, host/2))
}
