#include "textflag.h"

// func vforkClone(flags uintptr) (pid uintptr, errno uintptr)
//
// clone(flags, no new stack) for a vfork: until it execs, the child runs on this very
// stack, so whatever it calls after returning from here lands where this function's
// return address was; the parent, resumed after the child's execve, would return
// through that. The return address therefore waits in R12 (kept by the kernel across
// the system call, and copied into the child) and goes back on the stack only after
// it, in each process.
TEXT ·vforkClone(SB), NOSPLIT|NOFRAME, $0-24
	MOVQ flags+0(FP), DI
	XORQ SI, SI
	XORQ DX, DX
	XORQ R10, R10
	XORQ R8, R8
	MOVQ $56, AX                 // SYS_clone
	POPQ R12
	SYSCALL
	PUSHQ R12
	CMPQ AX, $0xfffffffffffff001 // -4095: a negated errno, as unsigned
	JLS  ok
	NEGQ AX
	MOVQ $0, pid+8(FP)
	MOVQ AX, errno+16(FP)
	RET

ok:
	MOVQ AX, pid+8(FP)
	MOVQ $0, errno+16(FP)
	RET

// func vforkClone3(args *cloneArgs) (pid uintptr, errno uintptr)
//
// vforkClone through clone3(args, sizeof *args), with no stack of its own in args:
// the child runs on this stack as above.
TEXT ·vforkClone3(SB), NOSPLIT|NOFRAME, $0-24
	MOVQ args+0(FP), DI
	MOVQ $88, SI                 // sizeof(struct clone_args), CLONE_ARGS_SIZE_VER2
	MOVQ $435, AX                // SYS_clone3
	POPQ R12
	SYSCALL
	PUSHQ R12
	CMPQ AX, $0xfffffffffffff001 // -4095: a negated errno, as unsigned
	JLS  ok3
	NEGQ AX
	MOVQ $0, pid+8(FP)
	MOVQ AX, errno+16(FP)
	RET

ok3:
	MOVQ AX, pid+8(FP)
	MOVQ $0, errno+16(FP)
	RET
