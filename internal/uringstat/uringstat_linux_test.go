package uringstat

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

const mask = unix.STATX_TYPE | unix.STATX_MODE | unix.STATX_INO | unix.STATX_CTIME | unix.STATX_NLINK

func cstr(s string) *byte { b := append([]byte(s), 0); return &b[0] }

// TestRingWorkersAreOwnThreads: the kernel's workers that run the statx's are
// threads of this process (iou-wrk-*, in /proc/self/task), so their CPU time is
// in its rusage and in the one its parent reads by wait4: the bench's CPU figure
// counts them.
func TestRingWorkersAreOwnThreads(t *testing.T) {
	r, err := New(8)
	if err != nil {
		t.Fatalf("no io_uring: %v", err)
	}
	defer r.Close()
	fd, err := unix.Open("/", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	names := []*byte{cstr("usr"), cstr("etc"), cstr("proc"), cstr("dev")}
	if _, _, err := r.Lstatx(fd, names, mask); err != nil {
		t.Fatal(err)
	}
	comms, _ := filepath.Glob("/proc/self/task/*/comm")
	for _, c := range comms {
		if b, _ := os.ReadFile(c); strings.HasPrefix(string(b), "iou-wrk-") {
			return
		}
	}
	t.Fatalf("no iou-wrk thread among this process's %d threads after a ring's statx", len(comms))
}

// TestLstatxIsFstatat: each answer is fstatat(AT_SYMLINK_NOFOLLOW)'s — a symlink
// is not followed, a missing name is ENOENT — across more names than one
// submission holds; names that are not one component are never submitted; the
// ring's descriptor is close-on-exec.
func TestLstatxIsFstatat(t *testing.T) {
	r, err := New(8)
	if err != nil {
		t.Fatalf("no io_uring: %v", err)
	}
	defer r.Close()
	if fl, err := unix.FcntlInt(uintptr(r.fd), unix.F_GETFD, 0); err != nil || fl&unix.FD_CLOEXEC == 0 {
		t.Fatalf("ring descriptor flags %#x, %v: not close-on-exec", fl, err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "file"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("file", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	names := []string{"file", "link", "sub", "missing", "..", ".", "", "sub/x", "file", "link"}
	ptrs := make([]*byte, len(names))
	for i, n := range names {
		ptrs[i] = cstr(n)
	}
	ptrs = append(ptrs, nil)
	if _, _, err := r.Lstatx(fd, ptrs, mask); err == nil {
		t.Fatal("more names than the ring's entries taken")
	}
	for lo := 0; lo < len(ptrs); lo += r.Entries() {
		hi := min(lo+r.Entries(), len(ptrs))
		out, errs, err := r.Lstatx(fd, ptrs[lo:hi], mask)
		if err != nil {
			t.Fatal(err)
		}
		for i := range out {
			name := "<nil>"
			if lo+i < len(names) {
				name = names[lo+i]
			}
			switch name {
			case "..", ".", "", "sub/x", "<nil>":
				if !errors.Is(errs[i], ErrName) {
					t.Errorf("%q submitted: %v", name, errs[i])
				}
				continue
			}
			var st unix.Stat_t
			werr := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
			if werr != nil || errs[i] != nil {
				if !errors.Is(errs[i], werr) || werr == nil {
					t.Errorf("%q: ring %v, fstatat %v", name, errs[i], werr)
				}
				continue
			}
			x := out[i]
			if uint32(x.Mode) != st.Mode || x.Ino != st.Ino || uint64(x.Nlink) != uint64(st.Nlink) ||
				unix.Mkdev(x.Dev_major, x.Dev_minor) != uint64(st.Dev) ||
				x.Ctime.Sec != st.Ctim.Sec || int64(x.Ctime.Nsec) != st.Ctim.Nsec || x.Mask&mask != mask {
				t.Errorf("%q: ring %+v, fstatat %+v", name, x, st)
			}
		}
	}
}
