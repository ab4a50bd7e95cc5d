package audit

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/internal/uringstat"
)

// TestRingStatsAreFstatats: the walk's lstats through io_uring
// (audit_uring_linux.go) keep what fstatat's keep — every entryStat, every
// subdirectory's identity, every entry with more than one name, and whether all
// could be lstat'ed — on a directory of every type a user can make (and devices
// as root), an unreadable directory, hard links, names with newlines, bytes that
// are not UTF-8 and 255 bytes, entries removed after the listing, and names a
// ring never takes ("..", ".", one with a '/'), in one and in several goroutines,
// across several of the ring's batches. And the rings were used.
func TestRingStatsAreFstatats(t *testing.T) {
	if r, err := uringstat.New(ringEntries); err != nil {
		testenv.Skip(t, "no io_uring for the walk here: %v", err)
	} else {
		r.Close()
	}
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	var gone []string
	for i := range 300 {
		name := fmt.Sprintf("f%03d", i)
		switch i % 5 {
		case 1:
			name += strings.Repeat("x", 255-len(name))
		case 2:
			name += "\xff\xfe"
		case 3:
			name += "\nline"
		}
		p := filepath.Join(dir, name)
		must(os.WriteFile(p, nil, 0o640|os.FileMode(i%3)))
		switch i % 11 {
		case 4:
			must(os.Link(p, filepath.Join(dir, fmt.Sprintf("h%03d", i))))
		case 7:
			gone = append(gone, p)
		}
	}
	must(os.Mkdir(filepath.Join(dir, "sub"), 0o755))
	must(os.Mkdir(filepath.Join(dir, "closed"), 0))
	must(os.Symlink("sub", filepath.Join(dir, "link")))
	must(os.Symlink("nowhere", filepath.Join(dir, "dangling")))
	must(unix.Mkfifo(filepath.Join(dir, "fifo"), 0o644))
	l, err := net.Listen("unix", filepath.Join(dir, "sock"))
	must(err)
	defer l.Close()
	if err := unix.Mknod(filepath.Join(dir, "null"), unix.S_IFCHR|0o644, int(unix.Mkdev(1, 3))); err != nil && !errors.Is(err, unix.EPERM) {
		t.Fatal(err)
	}
	if err := unix.Mknod(filepath.Join(dir, "loop"), unix.S_IFBLK|0o600, int(unix.Mkdev(7, 1000))); err != nil && !errors.Is(err, unix.EPERM) {
		t.Fatal(err)
	}

	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	must(err)
	defer unix.Close(fd)
	r := &direntReader{fd: fd}
	var ents []os.DirEntry
	for {
		batch, err := r.next(1000)
		ents = append(ents, batch...)
		if errors.Is(err, io.EOF) {
			break
		}
		must(err)
	}
	for _, p := range gone {
		must(os.Remove(p))
	}
	// Names no listing gives, each followed by a NUL as a dirent's is.
	for _, name := range []string{"..\x00", ".\x00", "sub/f\x00", "sub\x00"} {
		ents = append(ents, newDirent(name[:len(name)-1], 0))
	}

	type answer struct {
		stats   []entryStat
		subdirs []subdirID
		links   []linkID
		ok      bool
	}
	stat := func(parts int, rings *ringPool) answer {
		a := answer{stats: make([]entryStat, len(ents))}
		a.subdirs, a.links, a.ok = statAll(fd, ents, a.stats, parts, rings)
		return a
	}
	for _, parts := range []int{1, statParts} {
		want := stat(parts, nil)
		if want.ok {
			t.Fatal("fstatat's lstats all succeeded, with entries removed")
		}
		pool := &ringPool{max: parts}
		got := stat(parts, pool)
		// Every entry but the removed ones and the three names never submitted.
		if n := pool.answered.Load(); n != int64(len(ents)-len(gone)-3) || pool.refused {
			t.Fatalf("parts %d: rings answered %d of %d entries (refused %v)", parts, n, len(ents), pool.refused)
		}
		pool.close()
		// A ring refused (the io_uring_disabled sysctl, seccomp, MEMLOCK):
		// fstatat's answer, and no ring tried again.
		newRing = func(uint32) (*uringstat.Ring, error) { return nil, unix.EPERM }
		refused := &ringPool{max: parts}
		if fallback := stat(parts, refused); !reflect.DeepEqual(fallback, want) || !refused.refused || refused.made != 0 {
			t.Errorf("parts %d, io_uring refused: refused %v, %d rings, answer differs %v", parts, refused.refused, refused.made, !reflect.DeepEqual(fallback, want))
		}
		newRing = uringstat.New
		if !reflect.DeepEqual(got, want) {
			for i := range ents {
				if got.stats[i] != want.stats[i] {
					t.Errorf("%q: ring %+v, fstatat %+v", ents[i].Name(), got.stats[i], want.stats[i])
				}
			}
			t.Fatalf("parts %d: ring's answer\n%+v\nfstatat's\n%+v", parts, got, want)
		}
	}
}

// TestRingScanSameScan: a scan whose lstats go through rings returns what one by
// fstatat returns — the same walk, entry by entry — on a tree big enough for the
// rings (a nested repository, a FIFO, a symlinked directory among 5,000 files);
// and a small tree's scan makes no ring at all, since a ring's setup costs more
// than its few lstats save.
func TestRingScanSameScan(t *testing.T) {
	if r, err := uringstat.New(ringEntries); err != nil {
		testenv.Skip(t, "no io_uring for the walk here: %v", err)
	} else {
		r.Close()
	}
	scanOpt := func(repo string, ring bool, opt ScanOptions) (*Surface, int64) {
		t.Helper()
		noRing = !ring
		defer func() { noRing = false }()
		before := ringsMade.Load()
		s, err := Scan(repo, opt)
		if err != nil {
			t.Fatal(err)
		}
		return s, ringsMade.Load() - before
	}
	scan := func(repo string, ring bool) (*Surface, int64) {
		t.Helper()
		return scanOpt(repo, ring, ScanOptions{Walk: true})
	}

	small := newFixture(t)
	for i := range 300 {
		small.Write(fmt.Sprintf("src/d%d/f%03d", i%3, i), "x\n", 0o644)
	}
	if _, rings := scan(small.Repo, true); rings != 0 {
		t.Errorf("a scan of 300 files made %d rings", rings)
	}
	// A scan told the tree holds many entries (a launch's WalkHint, from the
	// shadow index) makes its rings from the first directory on, with the same
	// walk; an end scan that takes the rest from the launch keeps the threshold.
	hint := ScanOptions{Walk: true, Watch: true, WalkHint: ringAfterEntries}
	hinted, _ := scanOpt(small.Repo, false, hint)
	hinted.Launch.Close()
	launch, rings := scanOpt(small.Repo, true, hint)
	if rings == 0 {
		t.Errorf("a scan of 300 files with a hint of %d entries made no ring", ringAfterEntries)
	}
	if hinted.Walk.Clock = launch.Walk.Clock; !reflect.DeepEqual(hinted.Walk, launch.Walk) {
		t.Errorf("with a hint, the walks differ:\nfstatat: %v\nrings:   %v", walkLen(hinted), walkLen(launch))
	}
	if launch.Launch != nil {
		small.Write("src/d1/f001", "changed\n", 0o644)
		launch.Launch.Stop()
		if _, rings := scanOpt(small.Repo, true, ScanOptions{Walk: true, WalkHint: ringAfterEntries, Since: launch.Launch}); rings != 0 {
			t.Errorf("an end scan that read one directory again made %d rings", rings)
		}
	}

	f := newFixture(t)
	for d := range 50 {
		for i := range 100 {
			f.Write(fmt.Sprintf("src/d%02d/f%03d", d, i), "x\n", 0o644)
		}
	}
	f.GitdirAt("src/d07/.git")
	if err := unix.Mkfifo(filepath.Join(f.Repo, "src/d09/fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../d01", filepath.Join(f.Repo, "src/d10/link")); err != nil {
		t.Fatal(err)
	}
	byStat, _ := scan(f.Repo, false)
	byRing, rings := scan(f.Repo, true)
	if rings == 0 {
		t.Fatal("a scan of 5,000 files made no ring")
	}
	byStat.Walk.Clock = byRing.Walk.Clock
	if !byRing.Walk.Complete || len(byRing.Walk.Entries) < 4900 {
		t.Fatalf("walk complete %v with %d entries", byRing.Walk.Complete, len(byRing.Walk.Entries))
	}
	if !reflect.DeepEqual(byStat, byRing) {
		t.Errorf("the scans differ:\nfstatat: %+v %v\nrings:   %+v %v", byStat.Skipped, walkLen(byStat), byRing.Skipped, walkLen(byRing))
	}
}
