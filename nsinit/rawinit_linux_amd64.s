//go:build !race

#include "textflag.h"

// func rawClone(flags, stack, arena, role uintptr) (pid uintptr, errno uintptr)
//
// clone(flags) with the child on its own stack (stack: the top, 16-byte aligned), where
// it calls rawInitMain(arena) (role 0) or rawCommandMain(arena) (role 1) and never
// returns into the caller's frames, which the child cannot use: they belong to the
// caller, which keeps running (the raw init) or is suspended until the child's execve
// (the command). The arena travels in R12, which the kernel copies into the child.
TEXT ·rawClone(SB), NOSPLIT, $0-48
	MOVQ flags+0(FP), DI
	MOVQ stack+8(FP), SI
	MOVQ arena+16(FP), R12
	MOVQ role+24(FP), R13
	XORQ DX, DX                  // parent_tid
	XORQ R10, R10                // child_tid
	XORQ R8, R8                  // tls: the child makes no use of it
	MOVQ $56, AX                 // SYS_clone
	SYSCALL
	CMPQ AX, $0
	JEQ  child
	CMPQ AX, $0xfffffffffffff001 // -4095: a negated errno, as unsigned
	JLS  ok
	NEGQ AX
	MOVQ $0, pid+32(FP)
	MOVQ AX, errno+40(FP)
	RET

ok:
	MOVQ AX, pid+32(FP)
	MOVQ $0, errno+40(FP)
	RET

child:
	// Indirect calls: the child runs on a stack of its own, which the linker's
	// check of nosplit call chains (the caller's stack) must not follow.
	SUBQ $16, SP
	MOVQ R12, 0(SP)
	LEAQ ·rawInitMain(SB), AX
	CMPQ R13, $0
	JEQ  call
	LEAQ ·rawCommandMain(SB), AX

call:
	CALL AX

exit:
	MOVQ $125, DI
	MOVQ $231, AX                // SYS_exit_group
	SYSCALL
	JMP  exit

// func rawClone3(args *cloneArgs, arena, role uintptr) (pid uintptr, errno uintptr)
//
// rawClone through clone3(args, sizeof *args): args holds the flags and the child's
// stack (its base and size), and the child goes on as rawClone's.
TEXT ·rawClone3(SB), NOSPLIT, $0-40
	MOVQ args+0(FP), DI
	MOVQ $88, SI                 // sizeof(struct clone_args), CLONE_ARGS_SIZE_VER2
	MOVQ arena+8(FP), R12
	MOVQ role+16(FP), R13
	MOVQ $435, AX                // SYS_clone3
	SYSCALL
	CMPQ AX, $0
	JEQ  child
	CMPQ AX, $0xfffffffffffff001 // -4095: a negated errno, as unsigned
	JLS  ok
	NEGQ AX
	MOVQ $0, pid+24(FP)
	MOVQ AX, errno+32(FP)
	RET

ok:
	MOVQ AX, pid+24(FP)
	MOVQ $0, errno+32(FP)
	RET

child:
	SUBQ $16, SP
	MOVQ R12, 0(SP)
	LEAQ ·rawInitMain(SB), AX
	CMPQ R13, $0
	JEQ  call
	LEAQ ·rawCommandMain(SB), AX

call:
	CALL AX

exit:
	MOVQ $125, DI
	MOVQ $231, AX                // SYS_exit_group
	SYSCALL
	JMP  exit
