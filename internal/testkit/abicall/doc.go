// Package abicall makes system calls through the ABIs a Go program does not use, for
// the tests that check the seccomp filter covers them: on amd64, the i386 ABI's
// `int $0x80` from 64-bit code (what a 32-bit program's calls look like to the
// kernel and its filters, arch AUDIT_ARCH_I386, with i386's own numbers). x32's calls
// need no assembly: they are x86_64's syscall instruction with the number's bit
// 0x40000000 set.
package abicall
