package abicall

// Int80 makes i386 system call nr with three arguments (their low 32 bits) and
// returns the kernel's answer, a negative errno on failure. Where the kernel runs no
// i386 code (CONFIG_IA32_EMULATION off, ia32_emulation=0, or a hypervisor that
// traps the gate) the instruction faults and the process dies of SIGSEGV: call it
// in a process of its own.
func Int80(nr, a1, a2, a3 uintptr) int32
