package widen

import (
	"os"
	"path/filepath"
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
