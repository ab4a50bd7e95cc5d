package uringstat

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// benchDir is one directory of the tree under AGENTBOX_URINGSTAT_TREE, held open.
type benchDir struct {
	fd    int
	names []*byte
}

func loadTree(tb testing.TB) ([]benchDir, int) {
	root := os.Getenv("AGENTBOX_URINGSTAT_TREE")
	if root == "" {
		tb.Skip("AGENTBOX_URINGSTAT_TREE not set")
	}
	var dirs []benchDir
	total := 0
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if d.Name() == ".git" {
			return filepath.SkipDir
		}
		fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			tb.Fatal(err)
		}
		ents, _ := os.ReadDir(p)
		bd := benchDir{fd: fd}
		for _, e := range ents {
			b := append([]byte(e.Name()), 0)
			bd.names = append(bd.names, &b[0])
		}
		total += len(bd.names)
		dirs = append(dirs, bd)
		return nil
	})
	return dirs, total
}

func cpu() time.Duration {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

var ringSize = 64

func BenchmarkTree(b *testing.B) {
	dirs, total := loadTree(b)
	r, err := New(uint32(ringSize))
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	var st unix.Stat_t
	fstatat := func() {
		for _, d := range dirs {
			for _, n := range d.names {
				unix.Syscall6(unix.SYS_NEWFSTATAT, uintptr(d.fd), uintptr(unsafePointer(n)), uintptr(unsafePointer(&st)), unix.AT_SYMLINK_NOFOLLOW, 0, 0)
			}
		}
	}
	ring := func() {
		for _, d := range dirs {
			for lo := 0; lo < len(d.names); lo += r.Entries() {
				_, errs, err := r.Lstatx(d.fd, d.names[lo:min(lo+r.Entries(), len(d.names))], unix.STATX_TYPE|unix.STATX_MODE|unix.STATX_INO|unix.STATX_CTIME|unix.STATX_NLINK)
				if err != nil {
					b.Fatal(err)
				}
				for _, e := range errs {
					if e != nil {
						b.Fatal(e)
					}
				}
			}
		}
	}
	var wf, wr, cf, cr time.Duration
	for range b.N {
		for _, v := range []struct {
			f    func()
			w, c *time.Duration
		}{{fstatat, &wf, &cf}, {ring, &wr, &cr}} {
			c0, t0 := cpu(), time.Now()
			v.f()
			*v.w += time.Since(t0)
			*v.c += cpu() - c0
		}
	}
	n := float64(b.N * total)
	b.ReportMetric(float64(wf.Nanoseconds())/n, "fstatat-ns/entry")
	b.ReportMetric(float64(cf.Nanoseconds())/n, "fstatat-cpu-ns/entry")
	b.ReportMetric(float64(wr.Nanoseconds())/n, "uring-ns/entry")
	b.ReportMetric(float64(cr.Nanoseconds())/n, "uring-cpu-ns/entry")
	b.ReportMetric(float64(total), "entries")
}
