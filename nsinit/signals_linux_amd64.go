package nsinit

import (
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The raw catch: the Forwarded signals without os/signal, for a launcher that is a
// process of its own (the CLI, through CatchSignals).
//
// os/signal's first Notify starts a thread of its own for the signal masks (and the
// runtime's template thread with it, as any LockOSThread does), and its receiving
// goroutine blocks in a way that hands its P to yet another thread. In a launch that
// is otherwise CPU-bound, those thread starts (a clone, a fresh stack's page faults,
// a round of scheduling each) are a measurable part of `agentbox exec`. The raw catch is a handler of its own (signals_linux_amd64.s):
// before the launch takes the signals over it does what the signal would do
// uncaught; with the raw init, it writes the init's recSignal record straight to the
// control socket, so that forwarding a signal needs no goroutine at all; otherwise
// it writes the signal's number to a pipe that a goroutine reads through the poller.
// The handler replaces the runtime's for these signals only, and only until Stop:
// os/signal does not see them meanwhile.

// Read by rawSigHandler.
var (
	rawSigOwner int32 // the registering process
	rawSigMode  int32 // what the handler does: the sigMode constants
	rawSigFd    int32 // where it writes, in sigModePipe and sigModeRecord
)

const (
	sigModeUncaught = iota
	sigModePipe
	sigModeRecord
)

// rawCatching is 1 while a raw catch holds the handler (one per process).
var rawCatching atomic.Int32

// The handler and its restorer are only ever entered by the kernel, at the addresses
// rawSigAddrs takes in assembly.
//
//lint:ignore U1000 entered by the kernel
func rawSigHandler()

//lint:ignore U1000 entered by the kernel
func rawSigReturn()

func rawSigAddrs() (handler, restorer uintptr)

// kernelSigaction is struct sigaction as rt_sigaction takes it on amd64.
type kernelSigaction struct {
	handler  uintptr
	flags    uint64
	restorer uintptr
	mask     uint64
}

// sa_flags (asm-generic/signal-defs.h, and x86's SA_RESTORER): x/sys/unix has none.
const (
	saOnStack  = 0x08000000
	saRestart  = 0x10000000
	saRestorer = 0x04000000
)

// rawCatch is a registration of rawSigHandler for a set of signals.
type rawCatch struct {
	sigs []syscall.Signal
	old  []kernelSigaction // the runtime's, restored by stop
}

// catchRaw registers the raw handler for sigs, acting as if uncaught until a take-over
// (toPipe, toRecords). ok is false when it cannot (another raw catch holds the
// handler, a system call failed), and the caller uses os/signal.
func catchRaw(sigs []os.Signal) (rc *rawCatch, ok bool) {
	if !rawCatching.CompareAndSwap(0, 1) {
		return nil, false
	}
	atomic.StoreInt32(&rawSigMode, sigModeUncaught)
	atomic.StoreInt32(&rawSigOwner, int32(unix.Getpid()))
	rc = &rawCatch{}
	handler, restorer := rawSigAddrs()
	act := kernelSigaction{handler: handler, flags: saOnStack | saRestart | saRestorer, restorer: restorer, mask: ^uint64(0)}
	for _, s := range sigs {
		sig := s.(syscall.Signal)
		var old kernelSigaction
		if err := rtSigaction(sig, &act, &old); err != nil {
			rc.stop()
			return nil, false
		}
		rc.sigs, rc.old = append(rc.sigs, sig), append(rc.old, old)
	}
	return rc, true
}

func rtSigaction(sig syscall.Signal, act, old *kernelSigaction) error {
	_, _, e := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(act)), uintptr(unsafe.Pointer(old)), 8, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// toRecords takes the signals over for a raw init whose control socket is ctl: each
// becomes a recSignal record on it. The handler writes to a duplicate of ctl that
// stays open for the process's life, so that no handler still running on another
// thread can ever write to a descriptor reused meanwhile. It also keeps the raw init
// from exiting before the launcher does (rawInitMain): its exit, and the teardown of
// the sandbox's namespaces, come after the CLI has returned its status.
func (rc *rawCatch) toRecords(ctl *os.File) bool {
	raw, err := ctl.SyscallConn()
	if err != nil {
		return false
	}
	fd, dupErr := -1, error(nil)
	if err := raw.Control(func(c uintptr) { fd, dupErr = unix.FcntlInt(c, unix.F_DUPFD_CLOEXEC, 0) }); err != nil || dupErr != nil {
		return false
	}
	atomic.StoreInt32(&rawSigFd, int32(fd))
	atomic.StoreInt32(&rawSigMode, sigModeRecord)
	return true
}

// toPipe takes the signals over into a channel, through a pipe whose write end
// stays open for the process's life (as toRecords' descriptor).
func (rc *rawCatch) toPipe() (<-chan os.Signal, bool) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil, false
	}
	r := os.NewFile(uintptr(p[0]), "agentbox signals") // non-blocking: read through the poller
	atomic.StoreInt32(&rawSigFd, int32(p[1]))
	atomic.StoreInt32(&rawSigMode, sigModePipe)
	out := make(chan os.Signal, 16)
	go func() {
		defer r.Close()
		var buf [16]byte
		for {
			n, err := r.Read(buf[:])
			for _, b := range buf[:n] {
				out <- syscall.Signal(b)
			}
			if err != nil {
				return
			}
		}
	}()
	return out, true
}

// uncaught makes the signals act as if uncaught again, once a launch is over.
func (rc *rawCatch) uncaught() { atomic.StoreInt32(&rawSigMode, sigModeUncaught) }

// stop gives the signals back to the runtime's handlers.
func (rc *rawCatch) stop() {
	for i, sig := range rc.sigs {
		_ = rtSigaction(sig, &rc.old[i], nil)
	}
	rc.sigs = nil
	atomic.StoreInt32(&rawSigOwner, 0)
	rawCatching.Store(0)
}
