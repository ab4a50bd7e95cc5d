package audit

import (
	"bytes"
	"encoding/binary"
	"io"
	"io/fs"
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The working-tree walk lists directories with getdents64 into compact entries
// instead of os.File.ReadDir, which allocates two objects per entry (an entry and
// its name), and fresh heap is paid for in page faults — and the launch walk's
// listings live until the session's end (audit_since_linux.go). Here one
// getdents64 call's names are one string, and its entries one slice. The entries
// are what ReadDir gives (directory order, "." and ".." left out, a DT_UNKNOWN
// type found by lstat, an entry gone meanwhile skipped), so the walk cannot tell.

// dirent is one entry of a listing.
type dirent struct {
	name string
	typ  fs.FileMode
}

func (d *dirent) Name() string      { return d.name }
func (d *dirent) IsDir() bool       { return d.typ.IsDir() }
func (d *dirent) Type() fs.FileMode { return d.typ }

// Info is the entry's lstat; the walk never asks (it lstat's through the
// directory's descriptor), so it is not kept.
func (d *dirent) Info() (fs.FileInfo, error) {
	return nil, &fs.PathError{Op: "info", Path: d.name, Err: fs.ErrInvalid}
}

// direntBufs are getdents64 buffers, one per listing at a time.
var direntBufs = sync.Pool{New: func() any { b := make([]byte, 8<<10); return &b }}

// direntReader lists the open directory fd.
type direntReader struct {
	fd      int
	pending []os.DirEntry // read, not yet returned
	eof     bool
}

// next returns up to n entries in directory order, as os.File.ReadDir(n) does:
// an empty batch and io.EOF at the end.
func (r *direntReader) next(n int) ([]os.DirEntry, error) {
	for len(r.pending) < n && !r.eof {
		if err := r.fill(); err != nil {
			return r.take(n), err
		}
	}
	if len(r.pending) == 0 {
		return nil, io.EOF
	}
	return r.take(n), nil
}

func (r *direntReader) take(n int) []os.DirEntry {
	k := min(n, len(r.pending))
	out := r.pending[:k:k]
	r.pending = r.pending[k:]
	return out
}

// fill reads one getdents64 buffer into pending.
func (r *direntReader) fill() error {
	bp := direntBufs.Get().(*[]byte)
	defer direntBufs.Put(bp)
	buf := *bp
	var n int
	for {
		var err error
		n, err = unix.Getdents(r.fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &os.SyscallError{Syscall: "getdents64", Err: err}
		}
		break
	}
	if n <= 0 {
		r.eof = true
		return nil
	}
	ents, unknown, err := parseDirents(buf[:n])
	if err != nil {
		return &os.SyscallError{Syscall: "getdents64", Err: err}
	}
	if len(unknown) > 0 {
		kept, u := ents[:0], 0
		for i, e := range ents {
			if u < len(unknown) && unknown[u] == i {
				u++
				var st unix.Stat_t
				err := unix.Fstatat(r.fd, e.name, &st, unix.AT_SYMLINK_NOFOLLOW)
				if err == unix.ENOENT {
					continue // gone since it was listed, as ReadDir skips it
				}
				if err != nil {
					return &os.PathError{Op: "lstat", Path: e.name, Err: err}
				}
				e.typ = modeType(st.Mode)
			}
			kept = append(kept, e)
		}
		ents = kept
	}
	if r.pending == nil {
		r.pending = make([]os.DirEntry, 0, len(ents))
	}
	for i := range ents {
		r.pending = append(r.pending, &ents[i])
	}
	return nil
}

// parseDirents cuts the entries of one getdents64 result b: every name from one
// string holding the names alone, each followed there by a NUL (lstatAt relies on
// it), "." and ".." and deleted entries left out. unknown are the indexes of
// entries whose type the record does not give (DT_UNKNOWN). A record that does not
// fit b, or holds no NUL, is an error. The names are cut from a string of their
// own, not from a copy of b, so records and padding take no fresh heap.
func parseDirents(b []byte) (ents []dirent, unknown []int, err error) {
	count, size := 0, 0
	for off := 0; off < len(b); {
		reclen, ino, _, name, ok := direntRecord(b, off)
		if !ok {
			return nil, nil, unix.EIO
		}
		if keptName(ino, name) {
			count++
			size += len(name) + 1
		}
		off += reclen
	}
	// The kept names, each with its NUL, in one buffer that never grows: the
	// string over it is made once it is full, and never written after.
	buf := make([]byte, 0, size)
	for off := 0; off < len(b); {
		reclen, ino, _, name, _ := direntRecord(b, off)
		if keptName(ino, name) {
			buf = append(append(buf, name...), 0)
		}
		off += reclen
	}
	names := unsafe.String(unsafe.SliceData(buf), len(buf))
	ents = make([]dirent, 0, count)
	pos := 0
	for off := 0; off < len(b); {
		reclen, ino, dtype, name, _ := direntRecord(b, off)
		off += reclen
		if !keptName(ino, name) {
			continue
		}
		typ, ok := direntType(dtype)
		if !ok {
			unknown = append(unknown, len(ents))
		}
		ents = append(ents, dirent{name: names[pos : pos+len(name)], typ: typ})
		pos += len(name) + 1
	}
	return ents, unknown, nil
}

// direntRecord reads the getdents64 record at off in b: its length, inode, type
// and name (without its NUL); ok false when it does not fit b or holds no NUL.
func direntRecord(b []byte, off int) (reclen int, ino uint64, dtype byte, name []byte, ok bool) {
	if off+19 > len(b) {
		return 0, 0, 0, nil, false
	}
	reclen = int(binary.NativeEndian.Uint16(b[off+16:]))
	if reclen < 20 || off+reclen > len(b) {
		return 0, 0, 0, nil, false
	}
	rec := b[off+19 : off+reclen]
	nul := bytes.IndexByte(rec, 0)
	if nul < 0 {
		return 0, 0, 0, nil, false
	}
	return reclen, binary.NativeEndian.Uint64(b[off:]), b[off+18], rec[:nul], true
}

// keptName: the record is an entry (not deleted, not "." or "..").
func keptName(ino uint64, name []byte) bool {
	return ino != 0 && len(name) > 0 && string(name) != "." && string(name) != ".."
}

// direntType is the file type of a getdents64 d_type; ok false for DT_UNKNOWN.
func direntType(t uint8) (fs.FileMode, bool) {
	switch t {
	case unix.DT_REG:
		return 0, true
	case unix.DT_DIR:
		return fs.ModeDir, true
	case unix.DT_LNK:
		return fs.ModeSymlink, true
	case unix.DT_FIFO:
		return fs.ModeNamedPipe, true
	case unix.DT_SOCK:
		return fs.ModeSocket, true
	case unix.DT_CHR:
		return fs.ModeDevice | fs.ModeCharDevice, true
	case unix.DT_BLK:
		return fs.ModeDevice, true
	}
	return 0, false
}

// modeType is the fs.FileMode type of an st_mode.
func modeType(m uint32) fs.FileMode {
	switch m & unix.S_IFMT {
	case unix.S_IFDIR:
		return fs.ModeDir
	case unix.S_IFLNK:
		return fs.ModeSymlink
	case unix.S_IFIFO:
		return fs.ModeNamedPipe
	case unix.S_IFSOCK:
		return fs.ModeSocket
	case unix.S_IFCHR:
		return fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		return fs.ModeDevice
	case unix.S_IFREG:
		return 0
	}
	return fs.ModeIrregular
}

// lstatAt is fstatat(fd, name, AT_SYMLINK_NOFOLLOW) of an entry of a listing. A
// dirent's name is followed, in the string it was cut from, by getdents64's NUL
// (fill checks it), so it goes to the kernel as it is, where unix.Fstatat copies
// each name to add one: 100,000 allocations a walk of the big tree.
func lstatAt(fd int, e os.DirEntry, st *unix.Stat_t) error {
	d, ok := e.(*dirent)
	if !ok || d.name == "" {
		return unix.Fstatat(fd, e.Name(), st, unix.AT_SYMLINK_NOFOLLOW)
	}
	for {
		_, _, errno := unix.Syscall6(unix.SYS_NEWFSTATAT, uintptr(fd), uintptr(unsafe.Pointer(unsafe.StringData(d.name))),
			uintptr(unsafe.Pointer(st)), unix.AT_SYMLINK_NOFOLLOW, 0, 0)
		switch errno {
		case 0:
			return nil
		case unix.EINTR:
			continue
		}
		return errno
	}
}
