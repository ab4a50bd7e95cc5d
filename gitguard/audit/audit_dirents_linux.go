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

// dirent is one entry of a listing: the first byte of its name in the names
// buffer of the getdents64 call that read it (parseDirents), where each name is
// preceded by direntHead bytes (its type's code, then its length, little-endian)
// and followed by a NUL. A struct of one pointer, an os.DirEntry holds it as its
// data word, without an object of its own: 24 bytes of fresh heap an entry less
// than a name and a type behind a pointer, and the buffer holds no pointers
// (docs/performance.md, "the listings' own heap").
type dirent struct{ p *byte }

// direntHead is the type's code and the name's length (two bytes) before a name.
const direntHead = 3

func (d dirent) Name() string {
	if d.p == nil {
		return ""
	}
	n := int(*(*byte)(unsafe.Add(unsafe.Pointer(d.p), -2))) | int(*(*byte)(unsafe.Add(unsafe.Pointer(d.p), -1)))<<8
	return unsafe.String(d.p, n)
}

func (d dirent) IsDir() bool { return d.Type().IsDir() }
func (d dirent) Type() fs.FileMode {
	return direntTypes[*(*byte)(unsafe.Add(unsafe.Pointer(d.p), -direntHead))]
}

// setType sets the type of an entry whose listing is not yet handed out.
func (d dirent) setType(t fs.FileMode) {
	*(*byte)(unsafe.Add(unsafe.Pointer(d.p), -direntHead)) = typeCode(t)
}

// Info is the entry's lstat; the walk never asks (it lstat's through the
// directory's descriptor), so it is not kept.
func (d dirent) Info() (fs.FileInfo, error) {
	return nil, &fs.PathError{Op: "info", Path: d.Name(), Err: fs.ErrInvalid}
}

// newDirent is an entry of its own named name (not one of a listing).
func newDirent(name string, t fs.FileMode) dirent {
	b := make([]byte, direntHead+len(name)+1)
	b[0], b[1], b[2] = typeCode(t), byte(len(name)), byte(len(name)>>8)
	copy(b[direntHead:], name)
	return dirent{&b[direntHead]}
}

// direntTypes are the types a dirent's code stands for (typeCode).
var direntTypes = [...]fs.FileMode{0, fs.ModeDir, fs.ModeSymlink, fs.ModeNamedPipe, fs.ModeSocket,
	fs.ModeDevice | fs.ModeCharDevice, fs.ModeDevice, fs.ModeIrregular}

// typeCode is t's index in direntTypes; any type not there is ModeIrregular's.
func typeCode(t fs.FileMode) byte {
	for i, d := range direntTypes {
		if d == t {
			return byte(i)
		}
	}
	return byte(len(direntTypes) - 1)
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
	if ents, err = typeUnknown(r.fd, ents, unknown); err != nil {
		return err
	}
	if r.pending == nil {
		r.pending = ents // the first call's entries are the list (appendBatch)
	} else {
		r.pending = append(r.pending, ents...)
	}
	return nil
}

// typeUnknown gives each of ents[unknown[k]], whose record had no type, the type
// its lstat in the directory fd finds, and leaves out one gone since it was
// listed, as ReadDir does. The listing is not yet handed out: its buffer's type
// bytes may still be written.
func typeUnknown(fd int, ents []os.DirEntry, unknown []int) ([]os.DirEntry, error) {
	if len(unknown) == 0 {
		return ents, nil
	}
	kept, u := ents[:0], 0
	for i, e := range ents {
		if u < len(unknown) && unknown[u] == i {
			u++
			var st unix.Stat_t
			err := lstatAt(fd, e, &st)
			if err == unix.ENOENT {
				continue // gone since it was listed, as ReadDir skips it
			}
			if err != nil {
				return nil, &os.PathError{Op: "lstat", Path: e.Name(), Err: err}
			}
			e.(dirent).setType(modeType(st.Mode))
		}
		kept = append(kept, e)
	}
	return kept, nil
}

// parseDirents cuts the entries of one getdents64 result b: every name into one
// buffer holding the names alone, each preceded by its type and length and
// followed by a NUL (lstatAt relies on it), "." and ".." and deleted entries left
// out. unknown are the indexes of entries whose type the record does not give
// (DT_UNKNOWN; ModeIrregular until set). A record that does not fit b, or holds
// no NUL, is an error. The names are copied from b, so records and padding take
// no fresh heap, and the buffer is never written after but for the type of an
// entry of unknown type, which is outside every name.
func parseDirents(b []byte) (ents []os.DirEntry, unknown []int, err error) {
	count, size := 0, 0
	for off := 0; off < len(b); {
		reclen, ino, _, name, ok := direntRecord(b, off)
		if !ok {
			return nil, nil, unix.EIO
		}
		if keptName(ino, name) {
			count++
			size += direntHead + len(name) + 1
		}
		off += reclen
	}
	// One buffer that never grows, so that no entry's pointer moves.
	buf := make([]byte, 0, size)
	ents = make([]os.DirEntry, 0, count)
	for off := 0; off < len(b); {
		reclen, ino, dtype, name, _ := direntRecord(b, off)
		off += reclen
		if !keptName(ino, name) {
			continue
		}
		typ, ok := direntType(dtype)
		if !ok {
			unknown = append(unknown, len(ents))
			typ = fs.ModeIrregular
		}
		buf = append(buf, typeCode(typ), byte(len(name)), byte(len(name)>>8))
		ents = append(ents, dirent{&buf[len(buf):cap(buf)][0]})
		buf = append(append(buf, name...), 0)
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
	d, ok := e.(dirent)
	if !ok || d.p == nil {
		return unix.Fstatat(fd, e.Name(), st, unix.AT_SYMLINK_NOFOLLOW)
	}
	for {
		_, _, errno := unix.Syscall6(unix.SYS_NEWFSTATAT, uintptr(fd), uintptr(unsafe.Pointer(d.p)),
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
