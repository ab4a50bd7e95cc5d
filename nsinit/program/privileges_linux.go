package program

import (
	"fmt"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/seccomp"
	"github.com/agentbox/agentbox/internal/ucounts"
	"github.com/agentbox/agentbox/mounts"
)

// The init's identity and privileges: its own id maps first, and, last before
// the command, the drop of every privilege the setup needed.

// CompileIDMap: the init's own uid and gid map (uid and gid mapped to themselves),
// setgroups denied first, as the kernel requires for an unprivileged gid map — and
// as P5 wants: no dropping of supplementary groups to get around a group's denial.
// The init may: it maps its own effective ids and holds CAP_SETUID and CAP_SETGID
// in the namespace. Then the init becomes non-dumpable: the command, same uid, must
// not ptrace it or open /proc/1/exe, /proc/1/mem or its fds (runc CVE-2019-5736).
func (p *Program) CompileIDMap(uid, gid int, mapIDs bool) {
	if mapIDs {
		maps := opDesc{step: "map uid and gid"}
		for _, w := range [][2]string{
			{"/proc/self/setgroups", "deny"},
			{"/proc/self/uid_map", fmt.Sprintf("%d %d 1", uid, uid)},
			{"/proc/self/gid_map", fmt.Sprintf("%d %d 1", gid, gid)},
		} {
			fd := p.FdOp(maps, unix.SYS_OPENAT, uintptr(atFDCWD), p.Str(w[0]), unix.O_WRONLY|unix.O_CLOEXEC, 0)
			p.op(maps, unix.SYS_WRITE, uintptr(fd), p.Str(w[1]), uintptr(len(w[1])))
			p.CloseFd(fd)
		}
	}
	p.op(opDesc{step: "set init non-dumpable"}, unix.SYS_PRCTL, unix.PR_SET_DUMPABLE, 0)
	p.mark("idmap")
}

// lowerUserLimits puts the plan's limits (mounts.UserLimit) on the init's user
// namespace and on the init itself. A /proc/sys/user file shows the writer's
// namespace whatever proc it is opened through, and its root may write it while
// it holds CAP_SYS_RESOURCE there (the raw init has every capability, the Go init
// initCaps); the kernel checks these limits at every level up the tree, so a
// namespace the command nests cannot raise them back. A resource limit is lowered,
// soft and hard, on the init, whose command inherits it and cannot raise it.
func (p *Program) lowerUserLimits(limits []mounts.UserLimit) error {
	for _, l := range limits {
		d := opDesc{step: "lower the user limit " + l.Name}
		if l.IsRLimit() {
			r, err := ucounts.Resource(l)
			if err != nil {
				return err
			}
			p.op(d, unix.SYS_PRLIMIT64, 0, uintptr(r), p.Words(uint64(l.Max), uint64(l.Max)), 0)
			continue
		}
		if err := l.Check(); err != nil {
			return err
		}
		v := strconv.FormatInt(l.Max, 10)
		fd := p.FdOp(d, unix.SYS_OPENAT, uintptr(atFDCWD), p.Str("/proc/sys/user/"+l.Name), unix.O_WRONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		p.op(d, unix.SYS_WRITE, uintptr(fd), p.Str(v), uintptr(len(v)))
		p.CloseFd(fd)
	}
	if len(limits) > 0 {
		p.mark("user-limits") // on its own last op, not the one before
	}
	return nil
}

// dropPrivileges leaves the runner's thread, and so the command started from it,
// with no capability in any set, a bounding set that cannot regain one, securebits
// locked so that uid 0 gains nothing on execve (agentbox started as root still runs
// the command without any), no_new_privs, the Landlock domain of ruleset (when not
// -1: landlockRuleset; entering it needs no_new_privs) and the seccomp filter
// with the plan's rules (internal/seccomp). Under bwrap (drop false)
// only the domain: bwrap dropped the rest and installed the filter (the Go init
// checks: checkUnprivileged).
func (p *Program) dropPrivileges(ruleset int, drop bool, rules seccomp.Rules) error {
	d := opDesc{step: "drop privileges"}
	if drop {
		for c := 0; c <= 63; c++ {
			p.op(d, unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, uintptr(c)).OK = Errnos(unix.EINVAL) // past the kernel's last
		}
		p.op(d, unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0).OK = Errnos(unix.EINVAL)
		p.op(d, unix.SYS_PRCTL, unix.PR_SET_SECUREBITS, secbitNoroot|secbitNorootLocked|secbitNoSetuidFixup|secbitNoSetuidFixupLocked|
			secbitKeepCapsLocked|secbitNoCapAmbientRaise|secbitNoCapAmbientLocked)
		hdr := p.Words(uint64(unix.LINUX_CAPABILITY_VERSION_3), 0)
		data := p.Words(0, 0, 0) // two struct __user_cap_data_struct, zero
		p.op(d, unix.SYS_CAPSET, hdr, data)
		p.op(d, unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
	}
	if ruleset >= 0 {
		p.op(opDesc{step: "enter the Landlock domain"}, unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(ruleset), 0)
		p.CloseFd(ruleset)
	}
	if !drop {
		return nil
	}
	filter, err := seccomp.Program(rules)
	if err != nil {
		return err
	}
	fprog := p.Words(uint64(len(filter)/8), uint64(p.bytes(filter, 8)))
	p.op(d, unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, fprog)
	return nil
}

// Securebits (linux/securebits.h), for the privilege drop. With NOROOT locked, uid 0 gains no capabilities
// on execve: agentbox started as root still runs the command without any.
const (
	secbitNoroot              = 1 << 0
	secbitNorootLocked        = 1 << 1
	secbitNoSetuidFixup       = 1 << 2
	secbitNoSetuidFixupLocked = 1 << 3
	secbitKeepCapsLocked      = 1 << 5
	secbitNoCapAmbientRaise   = 1 << 6
	secbitNoCapAmbientLocked  = 1 << 7
)
