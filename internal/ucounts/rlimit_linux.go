package ucounts

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/mounts"
)

// rlimitResource is the resource of one of mounts.RLimitNames (a switch, not a
// map: the package's initialisation allocates nothing).
func rlimitResource(name string) (int, bool) {
	switch name {
	case "rlimit_nproc":
		return unix.RLIMIT_NPROC, true
	case "rlimit_sigpending":
		return unix.RLIMIT_SIGPENDING, true
	case "rlimit_msgqueue":
		return unix.RLIMIT_MSGQUEUE, true
	case "rlimit_memlock":
		return unix.RLIMIT_MEMLOCK, true
	}
	return 0, false
}

// Resource is the resource number of a resource limit named in a plan.
func Resource(l mounts.UserLimit) (int, error) {
	if err := l.Check(); err != nil {
		return 0, err
	}
	r, ok := rlimitResource(l.Name)
	if !ok {
		return 0, fmt.Errorf("user limit %s: not a resource limit", l.Name)
	}
	return r, nil
}

// rlimitShares are the session's resource limits: Share of the launcher's soft
// limit, which its other processes have too (they share a login's limits); an
// unlimited one is left alone, as nothing on the host is then bounded by it.
// RLIMIT_NPROC is also at most Share of tasks, the machine's pool of processes
// (taskPool), unlimited or not: every user's forks draw on that pool, and a
// quarter of a user's limit can be more than the whole of it (96,367 against
// pid_max's 32,768 on a default Debian host).
func rlimitShares(tasks int64) ([]mounts.UserLimit, error) {
	if !rlimitsPerNamespace(release()) {
		return nil, nil
	}
	var out []mounts.UserLimit
	for _, name := range mounts.RLimitNames {
		var lim unix.Rlimit
		r, _ := rlimitResource(name)
		if err := unix.Getrlimit(r, &lim); err != nil {
			return nil, fmt.Errorf("read the resource limit %s: %w", name, err)
		}
		switch {
		case r == unix.RLIMIT_NPROC:
			out = append(out, mounts.UserLimit{Name: name, Max: nprocShare(lim.Cur, tasks)})
		case lim.Cur == unix.RLIM_INFINITY || lim.Cur > 1<<62:
		case r == unix.RLIMIT_MEMLOCK:
			out = append(out, mounts.UserLimit{Name: name, Max: MemlockShare(int64(lim.Cur))})
		default:
			out = append(out, mounts.UserLimit{Name: name, Max: Share(int64(lim.Cur))})
		}
	}
	return out, nil
}

// nprocShare is the session's RLIMIT_NPROC for the launcher's soft limit soft and
// the machine's task pool: the lower of their shares.
func nprocShare(soft uint64, tasks int64) int64 {
	if soft == unix.RLIM_INFINITY || soft > 1<<62 {
		return Share(tasks)
	}
	return min(Share(int64(soft)), Share(tasks))
}

// rlimitsPerNamespace reports whether the kernel of release counts these resource
// limits per user namespace (ucounts, Linux 5.14). Before, each was one count per
// user for the whole host: a quarter of it in the sandbox would count the user's
// host processes and signals against the session's share (a user with more threads
// on the host than the share could not fork inside), and bound nothing of the
// session's own. No system call tells the two apart, so the release decides.
func rlimitsPerNamespace(release string) bool {
	major, rest, ok := leadingNumber(release)
	if !ok || rest == "" || rest[0] != '.' {
		return false
	}
	minor, _, ok := leadingNumber(rest[1:])
	return ok && (major > 5 || major == 5 && minor >= 14)
}

// leadingNumber takes the decimal number at the start of s ("18" of "18.4-amd64")
// and what follows it; ok is false where s starts with no digit or the number is
// past any release's.
func leadingNumber(s string) (n int, rest string, ok bool) {
	i := 0
	for i < len(s) && i < 9 && s[i] >= '0' && s[i] <= '9' {
		n = n*10 + int(s[i]-'0')
		i++
	}
	if i == 0 || i < len(s) && s[i] >= '0' && s[i] <= '9' {
		return 0, "", false
	}
	return n, s[i:], true
}

func release() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}
