package widen

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestWidenStaysBelowRoots: a path that names its root but climbs out of it with
// ".." widens nothing outside the root, as Roots promise.
func TestWidenStaysBelowRoots(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	out := filepath.Join(dir, "out")
	for _, d := range []string{root, out} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(out, 0); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(out, 0o700)
	r := &Relaxer{Roots: []string{root}}
	changed := r.Widen(root + "/../out")
	fi, err := os.Lstat(out)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0 {
		t.Errorf("Widen(%s/../out) changed %s, outside its root, to %o (reported changed=%v)", root, out, fi.Mode().Perm(), changed)
	}
	r.Restore()
}

// TestWidenRestore: what Widen widened below its root is put back, and only that.
func TestWidenRestore(t *testing.T) {
	root := t.TempDir()
	a := filepath.Join(root, "a")
	f := filepath.Join(a, "f")
	if err := os.Mkdir(a, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f, nil, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(a, 0o100); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(a, 0o700)
	r := &Relaxer{Roots: []string{root}}
	if !r.Widen(f) {
		t.Fatal("Widen changed nothing")
	}
	for p, want := range map[string]os.FileMode{a: 0o500, f: 0o400} {
		if fi, err := os.Lstat(p); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s widened: %v %v, want %o", p, fi.Mode().Perm(), err, want)
		}
	}
	r.Restore()
	for p, want := range map[string]os.FileMode{a: 0o100, f: 0} {
		if fi, err := os.Lstat(p); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s restored: %o %v, want %o", p, fi.Mode().Perm(), err, want)
		}
	}
}

// TestWidenTwoRelaxersOneDir: two audits widen the same 0000 directory, the
// second (adding write too) after the first; whichever order they restore in,
// the directory is 0000 again, not the first one's widened mode.
func TestWidenTwoRelaxersOneDir(t *testing.T) {
	for _, firstRestoresFirst := range []bool{true, false} {
		root, journal, a := lockedDir(t)
		r1 := &Relaxer{Roots: []string{root}, Journal: journal}
		r2 := &Relaxer{Roots: []string{root}, Journal: journal, DirBits: 0o700}
		if !r1.Widen(a) || !r2.Widen(a) {
			t.Fatal("Widen changed nothing")
		}
		if fi, _ := os.Lstat(a); fi.Mode().Perm() != 0o700 {
			t.Fatalf("widened twice: %o, want 700", fi.Mode().Perm())
		}
		if firstRestoresFirst {
			r1.Restore()
			if fi, _ := os.Lstat(a); fi.Mode().Perm() != 0o700 {
				t.Errorf("restored by the first while the second reads: %o, want 700 still", fi.Mode().Perm())
			}
			r2.Restore()
		} else {
			r2.Restore()
			r1.Restore()
		}
		if fi, _ := os.Lstat(a); fi.Mode().Perm() != 0 {
			t.Errorf("first restores first=%v: %s left %o, want 0", firstRestoresFirst, a, fi.Mode().Perm())
		}
		os.Chmod(a, 0o700)
		if ents, _ := os.ReadDir(journal); len(ents) != 1 || ents[0].Name() != "lock" {
			t.Errorf("journal left %v, want only its lock", ents)
		}
	}
}

// TestWidenKilledHolderRecovered: a process killed (SIGKILL) after it widened
// a 0000 directory and a 0311 one leaves its journal; Recover puts both modes
// back, and leaves alone a directory whose mode changed since.
func TestWidenKilledHolderRecovered(t *testing.T) {
	if os.Getenv("WIDEN_HELPER") != "" {
		r := &Relaxer{Roots: []string{os.Getenv("WIDEN_ROOT")}, Journal: os.Getenv("WIDEN_JOURNAL")}
		for _, p := range strings.Fields(os.Getenv("WIDEN_PATHS")) {
			if !r.Widen(p) {
				os.Exit(3)
			}
		}
		os.Stdout.WriteString("widened\n")
		select {} // until killed
	}
	root := t.TempDir()
	journal := filepath.Join(t.TempDir(), "widen")
	a, b, c := filepath.Join(root, "a"), filepath.Join(root, "b"), filepath.Join(root, "c")
	for p, m := range map[string]os.FileMode{a: 0, b: 0o311, c: 0} {
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, m); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestWidenKilledHolderRecovered$")
	cmd.Env = append(os.Environ(), "WIDEN_HELPER=1", "WIDEN_ROOT="+root, "WIDEN_JOURNAL="+journal, "WIDEN_PATHS="+a+" "+b+" "+c)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	if line != "widened\n" {
		cmd.Process.Kill()
		t.Fatalf("helper: %q", line)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if fi, _ := os.Lstat(a); fi.Mode().Perm() != 0o500 {
		t.Fatalf("helper left %s at %o, want its widened 500", a, fi.Mode().Perm())
	}
	os.Chmod(c, 0o750) // the user's own change since: not undone
	got := Recover(journal)
	for p, want := range map[string]os.FileMode{a: 0, b: 0o311, c: 0o750} {
		if fi, err := os.Lstat(p); err != nil || fi.Mode().Perm() != want {
			t.Errorf("after Recover %s is %o (%v), want %o", p, fi.Mode().Perm(), err, want)
		}
	}
	if len(got) != 2 {
		t.Errorf("Recover put back %v, want %s and %s", got, a, b)
	}
	if ents, _ := os.ReadDir(journal); len(ents) != 1 {
		t.Errorf("journal left %v, want only its lock", ents)
	}
	for _, p := range []string{a, b, c} {
		os.Chmod(p, 0o700)
	}
}

// TestWidenOpenJournaled: the quarantine makes a parent owner-writable
// (WidenOpen) while a scan has it widened; whatever order they put it back in,
// the directory ends as it was before either, 0000.
func TestWidenOpenJournaled(t *testing.T) {
	for _, scanFirst := range []bool{true, false} {
		root, journal, a := lockedDir(t)
		scan := &Relaxer{Roots: []string{root}, Journal: journal}
		if !scan.Widen(a) {
			t.Fatal("Widen changed nothing")
		}
		quarantine := &Relaxer{Roots: []string{root}, Journal: journal}
		fd, err := quarantine.Open(a, syscall.O_RDONLY|syscall.O_DIRECTORY)
		if err != nil {
			t.Fatal(err)
		}
		if err := quarantine.WidenOpen(fd, a, 0o300); err != nil {
			t.Fatal(err)
		}
		syscall.Close(fd)
		if fi, _ := os.Lstat(a); fi.Mode().Perm() != 0o700 {
			t.Fatalf("writable for the quarantine: %o, want 700", fi.Mode().Perm())
		}
		if scanFirst {
			scan.Restore()
			quarantine.Restore()
		} else {
			quarantine.Restore()
			scan.Restore()
		}
		if fi, _ := os.Lstat(a); fi.Mode().Perm() != 0 {
			t.Errorf("scan restores first=%v: %o left, want 0", scanFirst, fi.Mode().Perm())
		}
		os.Chmod(a, 0o700)
	}
}

// TestWidenReusedInodeNotRecovered: a killed holder's entry is about the inode
// it widened, not about a directory made at the same path since that the
// filesystem gave the same inode number (ext4 does at once) and that happens to
// have the widened mode: neither Recover nor the next widener takes the dead
// entry's original for it.
func TestWidenReusedInodeNotRecovered(t *testing.T) {
	if os.Getenv("WIDEN_HELPER") != "" {
		TestWidenKilledHolderRecovered(t)
		return
	}
	for _, recover := range []bool{true, false} {
		root, journal, a := lockedDir(t)
		killedWidener(t, root, journal, a)
		// The user's own directory in its place, of the mode the dead holder set.
		if err := os.Remove(a); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(a, 0o500); err != nil {
			t.Fatal(err)
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(a, &st); err != nil {
			t.Fatal(err)
		}
		ents, _ := filepath.Glob(filepath.Join(journal, "e-*"))
		if len(ents) != 1 {
			t.Fatalf("journal entries %v, want one", ents)
		}
		e, err := readEntry(journal, filepath.Base(ents[0]))
		if err != nil {
			t.Fatal(err)
		}
		if e.Dev != st.Dev || e.Ino != st.Ino {
			// Not given the same number here: the entry is moved to the new
			// inode's, which is what reuse leaves.
			os.Remove(ents[0])
			e.Dev, e.Ino = st.Dev, st.Ino
			if err := writeEntry(journal, e); err != nil {
				t.Fatal(err)
			}
		}
		if recover {
			Recover(journal)
		} else {
			r := &Relaxer{Roots: []string{root}, DirBits: 0o700, Journal: journal}
			if !r.Widen(a) {
				t.Fatal("Widen changed nothing")
			}
			r.Restore()
		}
		if fi, err := os.Lstat(a); err != nil || fi.Mode().Perm() != 0o500 {
			t.Errorf("recover %v: the new directory is %o (%v), want its own 500", recover, fi.Mode().Perm(), err)
		}
	}
}

// killedWidener widens paths below root, journaled, in a helper process it then
// kills with SIGKILL.
func killedWidener(t *testing.T, root, journal string, paths ...string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestWidenReusedInodeNotRecovered$")
	cmd.Env = append(os.Environ(), "WIDEN_HELPER=1", "WIDEN_ROOT="+root, "WIDEN_JOURNAL="+journal, "WIDEN_PATHS="+strings.Join(paths, " "))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if line != "widened\n" {
		t.Fatalf("helper: %q", line)
	}
}

// lockedDir makes a directory a of mode 0000 below a fresh root, and names a
// fresh widen journal for it.
func lockedDir(t *testing.T) (root, journal, a string) {
	t.Helper()
	root = t.TempDir()
	journal = filepath.Join(t.TempDir(), "widen")
	a = filepath.Join(root, "a")
	if err := os.Mkdir(a, 0); err != nil {
		t.Fatal(err)
	}
	return root, journal, a
}
