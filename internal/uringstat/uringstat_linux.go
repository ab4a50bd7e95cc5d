// Package uringstat lstat's many entries of one directory through an io_uring
// (IORING_OP_STATX), so that a walk pays one system call's trap per batch of
// entries instead of one per entry. It is the smallest ring that does that: one
// submitter at a time, statx only, every batch submitted and reaped whole within
// one call. Callers fall back to fstatat when New fails (io_uring disabled by the
// io_uring_disabled sysctl or a seccomp filter, the ring's memory refused).
package uringstat

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The kernel's ABI (include/uapi/linux/io_uring.h).
const (
	opStatx = 21 // IORING_OP_STATX

	offSQRing = 0          // IORING_OFF_SQ_RING
	offCQRing = 0x8000000  // IORING_OFF_CQ_RING
	offSQEs   = 0x10000000 // IORING_OFF_SQES

	featSingleMmap    = 1 << 0 // IORING_FEAT_SINGLE_MMAP
	featNativeWorkers = 1 << 9 // IORING_FEAT_NATIVE_WORKERS (Linux 5.12)

	enterGetEvents = 1 << 0 // IORING_ENTER_GETEVENTS

	setupClamp = 1 << 4 // IORING_SETUP_CLAMP

	sqeSize = 64
	cqeSize = 16
)

// sqringOffsets is struct io_sqring_offsets.
type sqringOffsets struct {
	head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
	userAddr                                                        uint64
}

// cqringOffsets is struct io_cqring_offsets.
type cqringOffsets struct {
	head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
	userAddr                                                        uint64
}

// params is struct io_uring_params.
type params struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFD uint32
	resv                                                                   [3]uint32
	sqOff                                                                  sqringOffsets
	cqOff                                                                  cqringOffsets
}

// sqe is struct io_uring_sqe as IORING_OP_STATX reads it.
type sqe struct {
	opcode     uint8
	flags      uint8
	ioprio     uint16
	fd         int32  // the directory
	addr2      uint64 // the struct statx to fill
	addr       uint64 // the name, NUL-terminated
	len        uint32 // the statx mask
	statxFlags uint32 // AT_* flags
	userData   uint64
	_          [3]uint64
}

// cqe is struct io_uring_cqe.
type cqe struct {
	userData uint64
	res      int32
	flags    uint32
}

// Ring is one io_uring for statx, used by one goroutine at a time.
type Ring struct {
	fd      int
	sqRing  []byte
	cqRing  []byte // aliases sqRing with IORING_FEAT_SINGLE_MMAP
	sqes    []byte
	entries uint32
	out     []unix.Statx_t // the kernel writes each batch's answers here
	errs    []error
	broken  bool // a submission failed: the kernel may still write to out

	sqTail  *uint32
	sqMask  uint32
	sqArray unsafe.Pointer
	cqHead  *uint32
	cqTail  *uint32
	cqMask  uint32
	cqes    unsafe.Pointer
}

// New sets up a ring of (up to) entries submission slots. Its descriptor is
// close-on-exec (io_uring_setup always sets O_CLOEXEC on it). It refuses a kernel
// whose io_uring workers are not threads of the calling process (before 5.12),
// so that their CPU time is the process's.
func New(entries uint32) (*Ring, error) {
	var p params
	p.flags = setupClamp
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	if errno != 0 {
		return nil, fmt.Errorf("io_uring_setup: %w", errno)
	}
	if p.features&featNativeWorkers == 0 {
		// Before Linux 5.12 the kernel ran the requests on kernel threads of
		// its own: their CPU is nobody's rusage (the bench would undercount the
		// launcher), and they borrowed the submitter's identity by copies.
		unix.Close(int(fd))
		return nil, errors.New("io_uring workers are not the process's own threads (Linux before 5.12)")
	}
	r := &Ring{fd: int(fd), entries: p.sqEntries}
	r.out, r.errs = make([]unix.Statx_t, r.entries), make([]error, r.entries)
	if err := r.mmap(&p); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

func (r *Ring) mmap(p *params) error {
	sqSize := int(p.sqOff.array) + int(p.sqEntries)*4
	cqSize := int(p.cqOff.cqes) + int(p.cqEntries)*cqeSize
	single := p.features&featSingleMmap != 0
	if single {
		sqSize = max(sqSize, cqSize)
	}
	var err error
	if r.sqRing, err = unix.Mmap(r.fd, offSQRing, sqSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		return fmt.Errorf("mmap io_uring SQ ring: %w", err)
	}
	if single {
		r.cqRing = r.sqRing
	} else if r.cqRing, err = unix.Mmap(r.fd, offCQRing, cqSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		return fmt.Errorf("mmap io_uring CQ ring: %w", err)
	}
	if r.sqes, err = unix.Mmap(r.fd, offSQEs, int(p.sqEntries)*sqeSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		return fmt.Errorf("mmap io_uring SQEs: %w", err)
	}
	sq, cq := unsafe.Pointer(&r.sqRing[0]), unsafe.Pointer(&r.cqRing[0])
	r.sqTail = (*uint32)(unsafe.Add(sq, p.sqOff.tail))
	r.sqMask = *(*uint32)(unsafe.Add(sq, p.sqOff.ringMask))
	r.sqArray = unsafe.Add(sq, p.sqOff.array)
	r.cqHead = (*uint32)(unsafe.Add(cq, p.cqOff.head))
	r.cqTail = (*uint32)(unsafe.Add(cq, p.cqOff.tail))
	r.cqMask = *(*uint32)(unsafe.Add(cq, p.cqOff.ringMask))
	r.cqes = unsafe.Add(cq, p.cqOff.cqes)
	return nil
}

// abandoned holds the answer buffers of rings closed after a failed submission:
// a statx still in flight may write to them after the ring is gone, so they are
// never freed.
var abandoned struct {
	sync.Mutex
	bufs [][]unix.Statx_t
}

// Close unmaps the ring and closes its descriptor.
func (r *Ring) Close() error {
	if r.broken {
		abandoned.Lock()
		abandoned.bufs = append(abandoned.bufs, r.out)
		abandoned.Unlock()
	}
	if r.sqes != nil {
		unix.Munmap(r.sqes)
	}
	if r.cqRing != nil && (r.sqRing == nil || &r.cqRing[0] != &r.sqRing[0]) {
		unix.Munmap(r.cqRing)
	}
	if r.sqRing != nil {
		unix.Munmap(r.sqRing)
	}
	r.sqes, r.cqRing, r.sqRing = nil, nil, nil
	return unix.Close(r.fd)
}

// Entries is how many statx's one submission holds.
func (r *Ring) Entries() int { return int(r.entries) }

// Lstatx statx's names[i] relative to the directory dirfd, not following a final
// symlink nor triggering an automount (what fstatat(AT_SYMLINK_NOFOLLOW) does).
// out[i] is names[i]'s answer, errs[i] its error (nil when it succeeded); both are
// the ring's own and hold until the next call. Each name must be followed in
// memory by a NUL byte, and be one path component: a name that is nil, empty,
// ".", ".." or holds a '/' is never submitted (errs[i] is ErrName). At most
// Entries names a call. An error is the ring's own failure: then no answer of the
// batch is to be trusted, and the ring is only to be closed.
func (r *Ring) Lstatx(dirfd int, names []*byte, mask uint32) (out []unix.Statx_t, errs []error, err error) {
	if r.broken {
		return nil, nil, errors.New("uringstat: ring failed before")
	}
	if len(names) > int(r.entries) {
		return nil, nil, fmt.Errorf("uringstat: %d names, more than the ring's %d", len(names), r.entries)
	}
	out, errs = r.out[:len(names)], r.errs[:len(names)]
	tail := *r.sqTail // only this goroutine writes it
	n := uint32(0)
	for i, name := range names {
		if !component(name) {
			errs[i] = ErrName
			continue
		}
		errs[i] = nil
		idx := (tail + n) & r.sqMask
		e := (*sqe)(unsafe.Pointer(&r.sqes[idx*sqeSize]))
		*e = sqe{
			opcode:     opStatx,
			fd:         int32(dirfd),
			addr:       uint64(uintptr(unsafe.Pointer(name))),
			addr2:      uint64(uintptr(unsafe.Pointer(&out[i]))),
			len:        mask,
			statxFlags: unix.AT_SYMLINK_NOFOLLOW | unix.AT_NO_AUTOMOUNT,
			userData:   uint64(i),
		}
		*(*uint32)(unsafe.Add(r.sqArray, idx*4)) = idx
		n++
	}
	if n == 0 {
		return out, errs, nil
	}
	atomic.StoreUint32(r.sqTail, tail+n)
	submitted, reaped := uint32(0), uint32(0)
	for stalled := 0; reaped < n; {
		ret, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(n-submitted), uintptr(n-reaped), enterGetEvents, 0, 0)
		got := uint32(0) // submitted by this call (ret is not a count with an error)
		switch errno {
		case 0:
			got = uint32(ret)
			submitted += got
		case unix.EINTR, unix.EAGAIN, unix.EBUSY:
		default:
			r.broken = true
			return nil, nil, fmt.Errorf("io_uring_enter: %w", errno)
		}
		k := r.reap(errs)
		reaped += k
		// A kernel that neither takes nor completes anything, again and again
		// (EAGAIN while memory is short), is a failed ring, not a loop.
		if stalled++; got > 0 || k > 0 {
			stalled = 0
		} else if stalled >= maxStalls {
			r.broken = true
			return nil, nil, fmt.Errorf("io_uring_enter: no progress after %d calls (last: %v)", stalled, errno)
		}
	}
	// The kernel copied each name when it took its submission, and wrote each
	// answer before posting its completion: every completion is in.
	runtime.KeepAlive(names)
	return out, errs, nil
}

// maxStalls bounds the io_uring_enter calls in a row that neither submit nor
// complete anything.
const maxStalls = 1000

// ErrName is a name Lstatx does not submit.
var ErrName = errors.New("uringstat: not a single path component")

// reap takes every posted completion.
func (r *Ring) reap(errs []error) uint32 {
	head := *r.cqHead
	tail := atomic.LoadUint32(r.cqTail)
	for h := head; h != tail; h++ {
		c := (*cqe)(unsafe.Add(r.cqes, (h&r.cqMask)*cqeSize))
		if i := c.userData; i < uint64(len(errs)) && c.res < 0 {
			errs[i] = unix.Errno(-c.res)
		}
	}
	atomic.StoreUint32(r.cqHead, tail)
	return tail - head
}

// component reports whether the NUL-terminated name is one path component other
// than "." and "..".
func component(name *byte) bool {
	if name == nil || *name == 0 {
		return false
	}
	dots := true
	k := 0
	for p := unsafe.Pointer(name); ; p = unsafe.Add(p, 1) {
		c := *(*byte)(p)
		if c == 0 {
			break
		}
		if c == '/' {
			return false
		}
		if c != '.' {
			dots = false
		}
		k++
	}
	return !(dots && k <= 2)
}
