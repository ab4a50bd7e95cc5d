// Package stack grows the calling goroutine's stack ahead of need.
//
// A goroutine starts with a 2 KiB stack, and the runtime doubles it when a call does
// not fit: it copies the stack and walks and adjusts every frame of the call chain
// through function tables that a short-lived process has mostly not touched yet.
// Grown once while the goroutine's chain is one frame deep, the copy is cheap. Use it
// only at the top of a goroutine that is known to need the size on every run: a
// bigger stack than needed costs pages of its own.
package stack

// To8K grows the calling goroutine's stack to 8 KiB at once.
//
//go:noinline
func To8K() {
	var frame [6 << 10]byte
	touch(frame[:])
}

// To16K grows the calling goroutine's stack to 16 KiB at once.
//
//go:noinline
func To16K() {
	var frame [12 << 10]byte
	touch(frame[:])
}

// To32K grows the calling goroutine's stack to 32 KiB at once.
//
//go:noinline
func To32K() {
	var frame [20 << 10]byte
	touch(frame[:])
}

// touch keeps a frame from being optimised away.
//
//go:noinline
func touch(b []byte) { b[len(b)-1]++ }
