#include "textflag.h"

// rawSigHandler is the kernel's handler for the forwarded signals while a raw catch
// is registered (signals_linux_amd64.go): C ABI, signal number in DI, on the thread's
// signal stack (SA_ONSTACK), every signal blocked. In the process that registered it
// (a child forked by os/exec shares it until its execve, and ignores it), it does
// what rawSigMode says:
//   0: as if uncaught: the default action back, and the signal again, which is
//      delivered once the handler returns; SIGWINCH, whose default is to be ignored,
//      is dropped and keeps the handler, for the launch that takes it over later;
//   1: the signal's number, one byte, to the pipe at rawSigFd;
//   2: a recSignal record to the raw init's control socket at rawSigFd.
// A full pipe or socket (EAGAIN: both are non-blocking) drops the signal. The kernel
// restores every register at rt_sigreturn; SYSCALL clobbers only CX and R11.
TEXT ·rawSigHandler(SB), NOSPLIT|NOFRAME, $0
	MOVQ DI, R8
	MOVQ $39, AX                 // SYS_getpid
	SYSCALL
	CMPL AX, ·rawSigOwner(SB)
	JNE  done
	MOVQ AX, R9
	MOVL ·rawSigMode(SB), AX
	CMPL AX, $1
	JEQ  pipe
	CMPL AX, $2
	JEQ  record
	CMPL R8, $28                 // SIGWINCH
	JEQ  done

	SUBQ $32, SP                 // struct sigaction: SIG_DFL, no flags
	MOVQ $0, 0(SP)
	MOVQ $0, 8(SP)
	MOVQ $0, 16(SP)
	MOVQ $0, 24(SP)
	MOVQ R8, DI
	MOVQ SP, SI
	XORQ DX, DX
	MOVQ $8, R10
	MOVQ $13, AX                 // SYS_rt_sigaction
	SYSCALL
	ADDQ $32, SP
	MOVQ R9, DI
	MOVQ R8, SI
	MOVQ $62, AX                 // SYS_kill
	SYSCALL
	RET

pipe:
	SUBQ $8, SP
	MOVB R8, 0(SP)
	MOVQ $1, DX
	JMP  write

record:
	SUBQ $8, SP
	MOVL $5, 0(SP)               // recSignal
	MOVL R8, 4(SP)
	MOVQ $8, DX

write:
	MOVLQSX ·rawSigFd(SB), DI
	MOVQ SP, SI
	MOVQ $1, AX                  // SYS_write
	SYSCALL
	ADDQ $8, SP

done:
	RET

// rawSigReturn is the handler's sa_restorer.
TEXT ·rawSigReturn(SB), NOSPLIT|NOFRAME, $0
	MOVQ $15, AX                 // SYS_rt_sigreturn
	SYSCALL
	INT  $3

// func rawSigAddrs() (handler, restorer uintptr)
TEXT ·rawSigAddrs(SB), NOSPLIT, $0-16
	LEAQ ·rawSigHandler(SB), AX
	MOVQ AX, handler+0(FP)
	LEAQ ·rawSigReturn(SB), AX
	MOVQ AX, restorer+8(FP)
	RET
