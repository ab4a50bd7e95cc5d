package prefault

import (
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// resident says, page by page, whether b's pages are mapped in (mincore).
func resident(t *testing.T, b []byte) []bool {
	t.Helper()
	page := unix.Getpagesize()
	vec := make([]byte, (len(b)+page-1)/page)
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatalf("mincore: %v", errno)
	}
	in := make([]bool, len(vec))
	for i, v := range vec {
		in[i] = v&1 != 0
	}
	return in
}

// fresh is n pages of anonymous memory never touched, unmapped at the test's end.
func fresh(t *testing.T, n int) []byte {
	t.Helper()
	b, err := unix.Mmap(-1, 0, n*unix.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(b) })
	for i, in := range resident(t, b) {
		if in {
			t.Fatalf("page %d of fresh memory is already mapped in", i)
		}
	}
	return b
}

// TestSliceMapsIn: the pages of a slice's backing array are mapped in, whole
// pages only, and read as zeros as before.
func TestSliceMapsIn(t *testing.T) {
	page := unix.Getpagesize()
	b := fresh(t, 16)
	// A slice of uint64 from the middle of page 1 to the middle of page 9:
	// pages 2–8 are wholly its own.
	s := unsafe.Slice((*uint64)(unsafe.Pointer(&b[page+page/2])), 8*page/8)[:0]
	Slice(s)
	for i, in := range resident(t, b) {
		if want := i >= 2 && i <= 8; in != want {
			t.Errorf("page %d mapped in: %v, want %v", i, in, want)
		}
	}
	for i, c := range b {
		if c != 0 {
			t.Fatalf("byte %d is %d after mapping in, want 0", i, c)
		}
	}
}

// TestAfterMapsInWhatFollows: the pages after a slice's array, up to the bound
// and within the mapping that holds it, are mapped in; the slice's own and
// those past the bound are not.
func TestAfterMapsInWhatFollows(t *testing.T) {
	page := unix.Getpagesize()
	b := fresh(t, 32)
	s := b[: 3*page-100 : 3*page-100] // ends within page 2: page 3 is the first after it
	After(s, 10*page)
	for i, in := range resident(t, b) {
		if want := i >= 3 && i < 13; in != want {
			t.Errorf("page %d mapped in: %v, want %v", i, in, want)
		}
	}
	// Bounded by the mapping's end, not beyond it.
	c := fresh(t, 8)
	After(c[:page:page], 1<<30)
	for i, in := range resident(t, c) {
		if want := i >= 1; in != want {
			t.Errorf("second mapping: page %d mapped in: %v, want %v", i, in, want)
		}
	}
}

// TestAfterLeavesFileMappings: a private mapping of a file is not anonymous
// memory, and is left alone (mapping it in for writing would copy each page).
func TestAfterLeavesFileMappings(t *testing.T) {
	page := unix.Getpagesize()
	f, err := os.CreateTemp(t.TempDir(), "m")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(int64(16 * page)); err != nil {
		t.Fatal(err)
	}
	b, err := unix.Mmap(int(f.Fd()), 0, 16*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(b)
	After(b[:page:page], 8*page)
	for i, in := range resident(t, b) {
		if in {
			t.Errorf("page %d of a file's private mapping was mapped in", i)
		}
	}
}

func TestParseMapsLine(t *testing.T) {
	for _, c := range []struct {
		line     string
		lo, hi   uintptr
		anon, ok bool
	}{
		{"c000000000-c000400000 rw-p 00000000 00:00 0 ", 0xc000000000, 0xc000400000, true, true},
		{"c000000000-c000400000 rw-p 00000000 00:00 0", 0xc000000000, 0xc000400000, true, true},
		{"7f0a1c000000-7f0a1c021000 rw-p 00000000 00:00 0                          [heap]", 0x7f0a1c000000, 0x7f0a1c021000, false, true},
		{"00400000-00452000 r-xp 00000000 08:02 173521      /usr/bin/dbus-daemon", 0x400000, 0x452000, false, true},
		{"00651000-00652000 rw-p 00051000 08:02 173521      /usr/bin/dbus-daemon", 0x651000, 0x652000, false, true},
		{"c000400000-c004000000 ---p 00000000 00:00 0 ", 0xc000400000, 0xc004000000, false, true},
		{"", 0, 0, false, false},
		{"zz-10 rw-p 0 0 0", 0, 0, false, false},
		{"10-20", 0, 0, false, false},
		{"10-20 rw-p", 0, 0, false, false},
	} {
		lo, hi, anon, ok := parseMapsLine([]byte(c.line))
		if ok != c.ok || ok && (lo != c.lo || hi != c.hi || anon != c.anon) {
			t.Errorf("%q: %#x-%#x anon %v ok %v, want %#x-%#x anon %v ok %v", c.line, lo, hi, anon, ok, c.lo, c.hi, c.anon, c.ok)
		}
	}
}
