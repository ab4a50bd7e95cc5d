package audit

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestDirentsAreReadDirs: the walk's getdents64 listing (audit_dirents_linux.go)
// gives what os.File.ReadDir gives — the same names, the same types, batches of
// the size asked for — on a directory of 9,000 entries (several getdents64
// buffers, batches cut inside one), with names of 255 bytes, bytes that are not
// UTF-8, newlines, and every type a user can make.
func TestDirentsAreReadDirs(t *testing.T) {
	dir := t.TempDir()
	for i := range 9000 {
		name := fmt.Sprintf("f%05d", i)
		switch i % 7 {
		case 1:
			name += strings.Repeat("x", 255-len(name))
		case 2:
			name += "\xff\xfe"
		case 3:
			name += "\nline"
		}
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Mkdir(filepath.Join(dir, "sub"), 0o755))
	must(os.Symlink("sub", filepath.Join(dir, "link")))
	must(unix.Mkfifo(filepath.Join(dir, "fifo"), 0o644))
	l, err := net.Listen("unix", filepath.Join(dir, "sock"))
	must(err)
	defer l.Close()
	if err := unix.Mknod(filepath.Join(dir, "null"), unix.S_IFCHR|0o644, int(unix.Mkdev(1, 3))); err != nil && !errors.Is(err, unix.EPERM) {
		t.Fatal(err)
	}

	want, err := os.ReadDir(dir) // sorted by name
	must(err)
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	must(err)
	defer unix.Close(fd)
	r := &direntReader{fd: fd}
	var got []os.DirEntry
	for {
		batch, err := r.next(1000)
		if len(batch) > 1000 {
			t.Fatalf("a batch of %d entries, asked for 1000", len(batch))
		}
		got = append(got, batch...)
		if errors.Is(err, io.EOF) {
			if len(batch) != 0 {
				t.Fatal("entries with io.EOF")
			}
			break
		}
		must(err)
		if len(batch) == 0 {
			t.Fatal("an empty batch without io.EOF")
		}
	}
	sort.Slice(got, func(i, j int) bool { return got[i].Name() < got[j].Name() })
	if len(got) != len(want) {
		t.Fatalf("%d entries, ReadDir gives %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Name() != want[i].Name() || got[i].Type() != want[i].Type() || got[i].IsDir() != want[i].IsDir() {
			t.Fatalf("entry %d: %q %v, ReadDir gives %q %v", i, got[i].Name(), got[i].Type(), want[i].Name(), want[i].Type())
		}
		// lstatAt passes the name as cut from the listing: the kernel finds the
		// entry it names, and no other.
		var st, ref unix.Stat_t
		must(lstatAt(fd, got[i], &st))
		must(unix.Lstat(filepath.Join(dir, want[i].Name()), &ref))
		if st.Ino != ref.Ino || st.Mode != ref.Mode {
			t.Fatalf("lstatAt %q: inode %d mode %o, lstat gives %d %o", got[i].Name(), st.Ino, st.Mode, ref.Ino, ref.Mode)
		}
	}
	// The types a DT_UNKNOWN entry is given by lstat are the ones d_type gives.
	for _, c := range []struct {
		dt   uint8
		mode uint32
	}{{unix.DT_REG, unix.S_IFREG}, {unix.DT_DIR, unix.S_IFDIR}, {unix.DT_LNK, unix.S_IFLNK}, {unix.DT_FIFO, unix.S_IFIFO},
		{unix.DT_SOCK, unix.S_IFSOCK}, {unix.DT_CHR, unix.S_IFCHR}, {unix.DT_BLK, unix.S_IFBLK}} {
		if typ, ok := direntType(c.dt); !ok || typ != modeType(c.mode) {
			t.Errorf("d_type %d: %v, lstat's mode gives %v", c.dt, typ, modeType(c.mode))
		}
	}
	if _, ok := direntType(unix.DT_UNKNOWN); ok {
		t.Error("DT_UNKNOWN taken as a type")
	}
}

// FuzzParseDirents: whatever bytes a getdents64 result holds, parseDirents does
// not panic, and every name it gives is non-empty, holds no NUL, and is followed
// by a NUL in the string it was cut from (what lstatAt passes to the kernel).
func FuzzParseDirents(f *testing.F) {
	rec := func(ino uint64, typ uint8, name string) []byte {
		n := (19 + len(name) + 1 + 7) &^ 7
		b := make([]byte, n)
		binary.NativeEndian.PutUint64(b, ino)
		binary.NativeEndian.PutUint16(b[16:], uint16(n))
		b[18] = typ
		copy(b[19:], name)
		return b
	}
	f.Add(append(append(rec(1, unix.DT_DIR, "."), rec(2, unix.DT_DIR, "..")...), rec(3, unix.DT_REG, "file")...))
	f.Add(append(rec(5, unix.DT_UNKNOWN, "x"), rec(0, unix.DT_REG, "deleted")...))
	f.Add(rec(7, unix.DT_LNK, strings.Repeat("n", 255)))
	f.Fuzz(func(t *testing.T, b []byte) {
		ents, unknown, err := parseDirents(b)
		if err != nil {
			return
		}
		for _, i := range unknown {
			if i < 0 || i >= len(ents) {
				t.Fatalf("unknown index %d of %d entries", i, len(ents))
			}
		}
		for _, e := range ents {
			name := e.Name()
			if name == "" || name == "." || name == ".." || strings.IndexByte(name, 0) >= 0 {
				t.Fatalf("name %q", name)
			}
			// The byte after the name, in the buffer it was cut from.
			after := unsafe.Slice(unsafe.StringData(name), len(name)+1)[len(name)]
			if after != 0 {
				t.Fatalf("name %q not followed by a NUL", name)
			}
			if d, ok := e.(dirent); !ok || d.p != unsafe.StringData(name) {
				t.Fatalf("entry %q is not a dirent of its own name", name)
			}
		}
	})
}

// TestTypeUnknown: entries whose getdents64 record gave no type (DT_UNKNOWN, as
// some file systems do) get the type their lstat finds, written into the
// listing's buffer beside the name without touching any name; one gone since it
// was listed is left out; an entry of known type is left as it is.
func TestTypeUnknown(t *testing.T) {
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dir, "file"), nil, 0o644))
	must(os.Mkdir(filepath.Join(dir, "sub"), 0o755))
	must(os.Symlink("sub", filepath.Join(dir, "link")))
	must(unix.Mkfifo(filepath.Join(dir, "fifo"), 0o644))
	rec := func(ino uint64, typ uint8, name string) []byte {
		n := (19 + len(name) + 1 + 7) &^ 7
		b := make([]byte, n)
		binary.NativeEndian.PutUint64(b, ino)
		binary.NativeEndian.PutUint16(b[16:], uint16(n))
		b[18] = typ
		copy(b[19:], name)
		return b
	}
	var b []byte
	for _, r := range []struct {
		typ  uint8
		name string
	}{{unix.DT_UNKNOWN, "file"}, {unix.DT_UNKNOWN, "gone"}, {unix.DT_UNKNOWN, "sub"}, {unix.DT_REG, "said-regular"},
		{unix.DT_UNKNOWN, "link"}, {unix.DT_UNKNOWN, "fifo"}} {
		b = append(b, rec(7, r.typ, r.name)...)
	}
	ents, unknown, err := parseDirents(b)
	must(err)
	if len(ents) != 6 || len(unknown) != 5 {
		t.Fatalf("%d entries, %d of unknown type; want 6 and 5", len(ents), len(unknown))
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	must(err)
	defer unix.Close(fd)
	ents, err = typeUnknown(fd, ents, unknown)
	must(err)
	want := []struct {
		name string
		typ  fs.FileMode
	}{{"file", 0}, {"sub", fs.ModeDir}, {"said-regular", 0}, {"link", fs.ModeSymlink}, {"fifo", fs.ModeNamedPipe}}
	if len(ents) != len(want) {
		t.Fatalf("%d entries after typing, want %d (the gone one left out)", len(ents), len(want))
	}
	for i, w := range want {
		if ents[i].Name() != w.name || ents[i].Type() != w.typ || ents[i].IsDir() != (w.typ == fs.ModeDir) {
			t.Errorf("entry %d: %q %v, want %q %v", i, ents[i].Name(), ents[i].Type(), w.name, w.typ)
		}
		var st unix.Stat_t
		if err := lstatAt(fd, ents[i], &st); err != nil && w.name != "said-regular" {
			t.Errorf("lstatAt %q after typing: %v", w.name, err)
		}
	}
}
