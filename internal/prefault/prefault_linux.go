package prefault

import (
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// madvPopulateWrite is MADV_POPULATE_WRITE (Linux 5.14): fault the range in
// writable, as a write to each page would, without writing.
const madvPopulateWrite = 23

// Slice maps in the whole pages of s's backing array, from its first element
// to its capacity. Meant for a large slice just made (its own span, not yet
// touched): a page partly shared with other objects at either end is left to
// fault as it would have. Best effort: a kernel without MADV_POPULATE_WRITE,
// or memory it cannot map in, leaves the pages to fault on first touch.
func Slice[E any](s []E) {
	if cap(s) == 0 {
		return
	}
	var e E
	n := uintptr(cap(s)) * unsafe.Sizeof(e)
	start := uintptr(unsafe.Pointer(unsafe.SliceData(s)))
	page := uintptr(unix.Getpagesize())
	lo := (start + page - 1) &^ (page - 1)
	hi := (start + n) &^ (page - 1)
	if hi <= lo {
		return
	}
	_, _, _ = unix.Syscall(unix.SYS_MADVISE, lo, hi-lo, madvPopulateWrite)
}

// After maps in up to max bytes of the writable mapping that holds s's backing
// array, from the page after that array's end: the memory the heap hands out
// next, when s was the last large allocation (Go's page heap grows upwards,
// taking the lowest free pages, within mappings made a chunk at a time). Pages
// the heap has already touched are left as they are; pages it never hands out
// cost the mapping-in and their memory, until the process ends.
func After[E any](s []E, max int) {
	if cap(s) == 0 || max <= 0 {
		return
	}
	var e E
	page := uintptr(unix.Getpagesize())
	end := uintptr(unsafe.Pointer(unsafe.SliceData(s))) + uintptr(cap(s))*unsafe.Sizeof(e)
	lo := (end + page - 1) &^ (page - 1)
	hi, ok := mappingEnd(lo)
	if !ok {
		return
	}
	hi = min(hi, lo+uintptr(max)) &^ (page - 1)
	if hi <= lo {
		return
	}
	_, _, _ = unix.Syscall(unix.SYS_MADVISE, lo, hi-lo, madvPopulateWrite)
}

// mappingEnd returns the end of the private writable anonymous mapping that
// holds addr, from /proc/self/maps; false when addr is in no such mapping (a
// file's private mapping would be copied page by page).
func mappingEnd(addr uintptr) (uintptr, bool) {
	fd, err := unix.Open("/proc/self/maps", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, false
	}
	defer unix.Close(fd)
	var buf [16 << 10]byte
	var line []byte
	for {
		n, err := unix.Read(fd, buf[:])
		if err == unix.EINTR {
			continue
		}
		if err != nil || n <= 0 {
			return 0, false
		}
		b := buf[:n]
		for len(b) > 0 {
			nl := -1
			for i, c := range b {
				if c == '\n' {
					nl = i
					break
				}
			}
			if nl < 0 {
				line = append(line, b...)
				break
			}
			line = append(line, b[:nl]...)
			b = b[nl+1:]
			if lo, hi, anon, ok := parseMapsLine(line); ok && lo <= addr && addr < hi {
				return hi, anon
			}
			line = line[:0]
		}
	}
}

// parseMapsLine reads "LO-HI PERMS OFFSET DEV INODE [PATH]", a line of
// /proc/self/maps; anon is a private writable mapping of no file (inode 0, no
// path).
func parseMapsLine(l []byte) (lo, hi uintptr, anon, ok bool) {
	hex := func(b []byte) (uintptr, []byte, bool) {
		var v uintptr
		i := 0
		for ; i < len(b); i++ {
			c := b[i]
			switch {
			case c >= '0' && c <= '9':
				v = v<<4 | uintptr(c-'0')
			case c >= 'a' && c <= 'f':
				v = v<<4 | uintptr(c-'a'+10)
			default:
				return v, b[i:], i > 0
			}
		}
		return v, nil, i > 0
	}
	lo, rest, ok := hex(l)
	if !ok || len(rest) == 0 || rest[0] != '-' {
		return 0, 0, false, false
	}
	hi, rest, ok = hex(rest[1:])
	if !ok || len(rest) < 5 || rest[0] != ' ' {
		return 0, 0, false, false
	}
	f := strings.Fields(string(rest))
	if len(f) < 4 {
		return 0, 0, false, false
	}
	return lo, hi, f[0] == "rw-p" && f[3] == "0" && len(f) == 4, true
}
