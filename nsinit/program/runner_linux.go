package program

import (
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// RunUntil is the Go init's runner of a compiled plan: it makes the ops from next up
// to until, in order, on the calling thread, which must be locked (capabilities,
// no_new_privs, Landlock and the seccomp filter are per thread, and the command
// inherits them from the thread that starts it). It is the raw init's loop
// (nsinit/rawinit_linux_amd64.go) in ordinary Go, plus the fallbacks only old
// kernels need (opNotSymlink, opRemountRO). It returns the index after the last op
// run; an error comes with the failed op's step (Failure). mark, when set, is called
// with the name of each of the program's timestamps as the run passes it.
func (p *Program) RunUntil(next, until uintptr, mark func(phase string)) (uintptr, string, error) {
	a := p.A
	for i := next; i < until && i < a.Nops; i++ {
		op := &a.Ops[i]
		var r uintptr
		var e syscall.Errno
		switch op.Nr {
		case OpSameFile:
			if a.SrcStat.Dev != uint64(op.Args[0]) || a.SrcStat.Ino != uint64(op.Args[1]) {
				e = unix.ESTALE
			}
		case OpIsGo:
			e = unix.EBADMSG // the Go init is never gated (Supervise runs BeforeExec first)
		case opNotSymlink:
			var st unix.Stat_t
			if err := unix.Fstat(int(op.Args[0]), &st); err != nil {
				e = err.(syscall.Errno)
			} else if st.Mode&unix.S_IFMT == unix.S_IFLNK {
				e = unix.ELOOP
			}
		case opRemountRO:
			if err := remountTreeRO(p.remounts[op.Args[0]]); err != nil {
				return i, "mount", err
			}
		default:
			for {
				r, _, e = unix.Syscall6(op.Nr, op.Args[0], op.Args[1], op.Args[2], op.Args[3], op.Args[4], op.Args[5])
				if e != unix.EINTR { // the one retry policy (retry_linux.go)
					break
				}
			}
		}
		if e != 0 && !Tolerated(op.OK, uintptr(e)) {
			a.FailOp, a.Errno = i+1, uintptr(e)
			step, err := p.Failure(int(i), e)
			return i, step, err
		}
		if e == 0 && op.Fd != 0 && r != op.Fd-1 {
			// The compiler's count of descriptors is wrong: stop rather than mount
			// through a descriptor that is not the one it meant.
			unix.Close(int(r))
			step, err := p.Failure(int(i), unix.EBADFD)
			return i, step, fmt.Errorf("%w (the kernel gave descriptor %d, the program expected %d)", err, r, op.Fd-1)
		}
		if op.Mark != 0 && mark != nil {
			if name := p.markName(op.Mark); name != "" {
				mark(name)
			}
		}
		switch {
		case e != 0:
			i += op.OrSkip
		case op.ThenSkip != 0:
			i += op.ThenSkip
		}
	}
	return min(until, a.Nops), "", nil
}
