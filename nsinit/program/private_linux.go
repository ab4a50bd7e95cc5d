package program

import "golang.org/x/sys/unix"

// makePrivate makes every mount of the namespace private: no mount event reaches
// the sandbox from the host, and none leaves it. compileMounts explains why it
// comes first.
func (p *Program) makePrivate() {
	flags := uintptr(unix.MS_PRIVATE | unix.MS_REC)
	p.op(mountDesc(MountError{Op: "make-rprivate", Target: "/", Flags: flags}),
		unix.SYS_MOUNT, p.Str(""), p.Str("/"), p.Str(""), flags, 0)
}
