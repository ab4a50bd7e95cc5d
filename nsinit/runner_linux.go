package nsinit

import (
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// runProgram is the Go init's runner of a compiled plan (program_linux.go): it makes
// the ops from next on, in order, on the calling thread, which must be locked
// (capabilities, no_new_privs, Landlock and the seccomp filter are per thread, and
// the command inherits them from the thread that starts it). It is the raw init's
// loop (rawinit_linux_amd64.go) in ordinary Go, plus the fallbacks only old kernels
// need (opNotSymlink, opRemountRO). It returns the index after the last op run; an
// error names the failed op's step (program.failure), with t marking the program's
// timestamps as phases.
func (p *program) runUntil(next, until uintptr, t *Timer) (uintptr, string, error) {
	a := p.a
	for i := next; i < until && i < a.nops; i++ {
		op := &a.ops[i]
		var r uintptr
		var e syscall.Errno
		switch op.nr {
		case opSameFile:
			if a.srcStat.Dev != uint64(op.args[0]) || a.srcStat.Ino != uint64(op.args[1]) {
				e = unix.ESTALE
			}
		case opIsGo:
			e = unix.EBADMSG // the Go init is never gated (Supervise runs BeforeExec first)
		case opNotSymlink:
			var st unix.Stat_t
			if err := unix.Fstat(int(op.args[0]), &st); err != nil {
				e = err.(syscall.Errno)
			} else if st.Mode&unix.S_IFMT == unix.S_IFLNK {
				e = unix.ELOOP
			}
		case opRemountRO:
			if err := remountTreeRO(p.remounts[op.args[0]]); err != nil {
				return i, "mount", err
			}
		default:
			for {
				r, _, e = unix.Syscall6(op.nr, op.args[0], op.args[1], op.args[2], op.args[3], op.args[4], op.args[5])
				if e != unix.EINTR { // the one retry policy (retry_linux.go)
					break
				}
			}
		}
		if e != 0 && uintptr(e) != op.ok {
			a.failOp, a.errno = i+1, uintptr(e)
			step, err := p.failure(int(i), e)
			return i, step, err
		}
		if e == 0 && op.fd != 0 && r != op.fd-1 {
			// The compiler's count of descriptors is wrong: stop rather than mount
			// through a descriptor that is not the one it meant.
			unix.Close(int(r))
			step, err := p.failure(int(i), unix.EBADFD)
			return i, step, fmt.Errorf("%w (the kernel gave descriptor %d, the program expected %d)", err, r, op.fd-1)
		}
		if op.mark != 0 && t != nil {
			if name := p.markName(op.mark); name != "" {
				t.Mark(name)
			}
		}
		switch {
		case e != 0:
			i += op.orSkip
		case op.thenSkip != 0:
			i += op.thenSkip
		}
	}
	return min(until, a.nops), "", nil
}
