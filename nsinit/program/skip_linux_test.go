package program

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/mounts"
)

// TestProgramSkipsVanishedCover: a cover's ops are skipped whole when its destination
// is gone by the time the runner gets there (a host socket the plan masks, removed
// meanwhile), and the descriptors predicted after the skip are still the ones the
// kernel gives; any other failure of the same open still stops the run. With
// openat2, and with the walk that stands in for it before Linux 5.6.
func TestProgramSkipsVanishedCover(t *testing.T) {
	for _, kf := range []Features{{Openat2: true}, {}} {
		t.Run(fmt.Sprintf("openat2=%v", kf.Openat2), func(t *testing.T) {
			if kf.Openat2 && !KernelFeatures().Openat2 {
				testenv.SkipKernel(t, "openat2", "the openat2 program needs Linux 5.6")
			}
			skipsVanishedCover(t, kf)
		})
	}
}

func skipsVanishedCover(t *testing.T, kf Features) {
	dir := t.TempDir()
	there := filepath.Join(dir, "there")
	if err := os.WriteFile(there, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	fds, err := OpenFds()
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(0, 1<<16, 0, fds, kf)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(p.Mem)
	p.root = p.FdOp(opDesc{step: "open /"}, unix.SYS_OPENAT, uintptr(atFDCWD), p.Str("/"), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	group := func(path string) {
		start := p.ifExists(path)
		fd := p.openBeneath(opDesc{step: "open " + path}, path, unix.O_PATH)
		p.op(opDesc{step: "fstat " + path}, unix.SYS_FSTAT, uintptr(fd), uintptr(unsafe.Pointer(&p.A.SrcStat)))
		p.CloseFd(fd)
		p.endIfExists(start)
	}
	group(filepath.Join(dir, "gone")) // removed below, after the compile
	group(there)
	after := p.FdOp(opDesc{step: "open after"}, unix.SYS_OPENAT, uintptr(p.root), p.Str(strings.TrimPrefix(there, "/")), unix.O_PATH|unix.O_CLOEXEC, 0)
	p.CloseFd(after)
	p.CloseFd(p.root)
	if err := os.WriteFile(filepath.Join(dir, "gone"), nil, 0o644); err == nil {
		os.Remove(filepath.Join(dir, "gone"))
	}
	if _, step, err := p.RunUntil(0, p.A.Nops, nil); err != nil {
		t.Fatalf("a vanished cover: %s: %v", step, err)
	}
	var st unix.Stat_t
	if err := unix.Stat(there, &st); err != nil || p.A.SrcStat.Ino != st.Ino {
		t.Errorf("the cover after the skipped one did not run: fstat ino %d, want %d", p.A.SrcStat.Ino, st.Ino)
	}
	// A symlink where the cover's destination was (swapped in by whoever owns the
	// directory): with openat2 the cover is skipped as a vanished one is — what
	// the link leads to is the sandbox's own view; the walk before openat2 (old
	// kernels: faccessat follows the link) still stops there.
	os.Remove(there)
	if err := os.Symlink("/etc/passwd", there); err != nil {
		t.Fatal(err)
	}
	p.A.SrcStat = unix.Stat_t{}
	_, _, err = p.RunUntil(0, p.A.Nops, nil)
	switch {
	case kf.Openat2 && err != nil:
		t.Errorf("a symlink at a cover's destination: %v, want the cover skipped", err)
	case kf.Openat2 && p.A.SrcStat.Ino != 0:
		t.Errorf("the cover of a symlink ran (fstat ino %d)", p.A.SrcStat.Ino)
	case !kf.Openat2 && (err == nil || !strings.Contains(err.Error(), "symlink")):
		t.Errorf("a symlink at a cover's destination, walk: %v, want the symlink refused", err)
	}
}

// TestErrnos: the tolerated set holds exactly the errnos put in it.
func TestErrnos(t *testing.T) {
	set := Errnos(unix.ENOENT, unix.ELOOP)
	for e := uintptr(0); e < 200; e++ {
		if got, want := Tolerated(set, e), e == uintptr(unix.ENOENT) || e == uintptr(unix.ELOOP); got != want {
			t.Errorf("Tolerated(%d) = %v", e, got)
		}
	}
}

// TestCoverToleratesUnlinkedMountPoint: a cover's move_mount tolerates ENOENT, the
// kernel's answer for a mount point unlinked after it was opened (a socket removed
// by its owner meanwhile), and runs on to the closes after it; before
// mount_setattr a path remount follows, which would fail on the vanished path, so
// there the move stays strict.
func TestCoverToleratesUnlinkedMountPoint(t *testing.T) {
	for _, setattr := range []bool{true, false} {
		fds, err := OpenFds()
		if err != nil {
			t.Fatal(err)
		}
		p, err := New(0, 1<<16, 0, fds, Features{Openat2: true, Setattr: setattr})
		if err != nil {
			t.Fatal(err)
		}
		p.root = p.FdOp(opDesc{step: "open /"}, unix.SYS_OPENAT, uintptr(atFDCWD), p.Str("/"), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		tree := p.FdOp(opDesc{step: "tree"}, unix.SYS_OPENAT, uintptr(atFDCWD), p.Str("/dev/null"), unix.O_PATH|unix.O_CLOEXEC, 0)
		start := p.ifExists("/run/daemon.sock")
		dest := p.openBeneath(opDesc{step: "open mount point"}, "/run/daemon.sock", unix.O_PATH)
		p.moveMount(mounts.Op{Source: "/dev/null", Dest: "/run/daemon.sock"}, tree, dest)
		p.endIfExists(start)
		var move *Op
		for i := start; i < p.A.Nops; i++ {
			if p.A.Ops[i].Nr == unix.SYS_MOVE_MOUNT {
				op := p.A.Ops[i] // a copy: the program's memory is unmapped below
				move = &op
			}
		}
		unix.Munmap(p.Mem)
		if move == nil {
			t.Fatal("no move_mount in the cover's group")
		}
		if got := Tolerated(move.OK, uintptr(unix.ENOENT)); got != setattr {
			t.Errorf("mount_setattr=%v: move_mount tolerates ENOENT: %v", setattr, got)
		}
		if move.OrSkip != 0 || Tolerated(move.OK, uintptr(unix.EBADF)) {
			t.Errorf("mount_setattr=%v: move_mount skips %d ops or tolerates EBADF", setattr, move.OrSkip)
		}
	}
}
