package stack

import (
	"testing"
	"unsafe"
)

// use takes about n bytes of stack, in frames of a little over 512 bytes.
//
//go:noinline
func use(n int) byte {
	var b [512]byte
	b[n%len(b)] = 1
	if n <= len(b) {
		return b[0]
	}
	return use(n-len(b)) + b[1]
}

// TestGrowOnce: each function moves a fresh goroutine's stack once (a copy), after
// which a call chain of the promised size runs without another copy. A local's
// address tells: a copy moves every frame.
func TestGrowOnce(t *testing.T) {
	for _, c := range []struct {
		name string
		grow func()
		need int // what fits after the growth
	}{
		{"To8K", To8K, 5 << 10},
		{"To16K", To16K, 12 << 10},
		{"To32K", To32K, 26 << 10},
	} {
		got := make(chan [3]uintptr)
		go func() {
			var x byte
			before := uintptr(unsafe.Pointer(&x))
			c.grow()
			grown := uintptr(unsafe.Pointer(&x))
			use(c.need)
			after := uintptr(unsafe.Pointer(&x))
			got <- [3]uintptr{before, grown, after}
		}()
		a := <-got
		if a[0] == a[1] {
			t.Errorf("%s: the stack was not copied", c.name)
		}
		if a[1] != a[2] {
			t.Errorf("%s: a chain of %d bytes copied the stack again", c.name, c.need)
		}
	}
}
