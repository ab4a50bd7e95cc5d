package ucounts

import "fmt"

// PtyMax is the session's bound on its devpts instance (mounts.Plan.PtyMax): Share
// of the pty pool that every devpts but the host's initial one draws on,
// kernel.pty.max less kernel.pty.reserve (the reserve is the initial instance's
// alone). The pool is the machine's, shared with every other session, container and
// sandbox, so one session that took it all left them no terminal. A pool that
// cannot be read fails: the session's devpts would then hold all of it.
func PtyMax() (int64, error) {
	limit, err := readInt("/proc/sys/kernel/pty/max")
	if err != nil {
		return 0, fmt.Errorf("%w; without it a session could take every terminal of the machine", err)
	}
	reserve, err := readInt("/proc/sys/kernel/pty/reserve")
	if err != nil {
		return 0, fmt.Errorf("%w; without it a session could take every terminal of the machine", err)
	}
	return Share(limit - reserve), nil
}
