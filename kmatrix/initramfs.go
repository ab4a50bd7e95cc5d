package kmatrix

import (
	"bufio"
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// image is the content of an initramfs, keyed by absolute path inside it. Parent
// directories are added implicitly.
type image struct {
	files    map[string]imageFile
	dirs     map[string]uint32
	symlinks map[string]string
}

type imageFile struct {
	host string // copy from this host file …
	data []byte // … or use these bytes
	perm uint32
}

func newImage() *image {
	return &image{files: map[string]imageFile{}, dirs: map[string]uint32{}, symlinks: map[string]string{}}
}

func (im *image) dir(p string, perm uint32) { im.dirs[filepath.Clean(p)] = perm }
func (im *image) symlink(p, target string)  { im.symlinks[filepath.Clean(p)] = target }
func (im *image) data(p string, perm uint32, b []byte) {
	im.files[filepath.Clean(p)] = imageFile{data: b, perm: perm}
}
func (im *image) host(p, hostPath string, perm uint32) {
	im.files[filepath.Clean(p)] = imageFile{host: hostPath, perm: perm}
}

// hostPath copies a host path into the image at the same place, recreating every
// symlink met on the way (/bin → usr/bin, the dynamic loader's chain), so that the
// copied binaries find their files where the host has them.
func (im *image) hostPath(p string) error {
	p = filepath.Clean(p)
	for depth := 0; depth < 40; depth++ {
		// Walk the components: the first symlink found is recorded and the walk
		// restarts from its target.
		parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
		cur := "/"
		restarted := false
		for i, part := range parts {
			cur = filepath.Join(cur, part)
			fi, err := os.Lstat(cur)
			if err != nil {
				return err
			}
			if fi.Mode()&os.ModeSymlink != 0 {
				target, err := os.Readlink(cur)
				if err != nil {
					return err
				}
				im.symlink(cur, target)
				if !filepath.IsAbs(target) {
					target = filepath.Join(filepath.Dir(cur), target)
				}
				p = filepath.Join(append([]string{target}, parts[i+1:]...)...)
				restarted = true
				break
			}
			if i == len(parts)-1 {
				if fi.IsDir() {
					im.dir(cur, uint32(fi.Mode().Perm()))
				} else {
					im.host(cur, cur, uint32(fi.Mode().Perm()))
				}
			}
		}
		if !restarted {
			return nil
		}
	}
	return fmt.Errorf("%s: too many symlinks", p)
}

// hostTree copies a host directory and everything below it to the same place,
// leaving out regular files larger than maxSize bytes.
func (im *image) hostTree(root string, maxSize int64) error {
	if err := im.hostPath(root); err != nil {
		return err
	}
	return filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			im.symlink(p, target)
		case fi.IsDir():
			im.dir(p, uint32(fi.Mode().Perm()))
		case fi.Mode().IsRegular() && fi.Size() <= maxSize:
			im.host(p, p, uint32(fi.Mode().Perm()))
		}
		return nil
	})
}

// hostProgram copies a host executable with its ELF interpreter and the shared
// libraries it needs, found the way the dynamic loader finds them on Debian.
func (im *image) hostProgram(p string) error {
	seen := map[string]bool{}
	var add func(string) error
	add = func(p string) error {
		if seen[p] {
			return nil
		}
		seen[p] = true
		if err := im.hostPath(p); err != nil {
			return err
		}
		f, err := elf.Open(p)
		if err != nil {
			return nil // a script: nothing more to copy
		}
		defer f.Close()
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP {
				b := make([]byte, prog.Filesz)
				if _, err := prog.ReadAt(b, 0); err == nil {
					if err := add(strings.TrimRight(string(b), "\x00")); err != nil {
						return err
					}
				}
			}
		}
		libs, err := f.ImportedLibraries()
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		for _, lib := range libs {
			lp, err := findLibrary(lib)
			if err != nil {
				return fmt.Errorf("%s needs %s: %w", p, lib, err)
			}
			if err := add(lp); err != nil {
				return err
			}
		}
		return nil
	}
	return add(p)
}

var libDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"}

func findLibrary(name string) (string, error) {
	if filepath.IsAbs(name) {
		return name, nil
	}
	for _, d := range libDirs {
		p := filepath.Join(d, name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("not found in %v", libDirs)
}

// write writes the image as a newc cpio archive: directories first (parents before
// children), then symlinks and files in path order.
func (im *image) write(out string) error {
	for p := range im.files {
		im.parents(p)
	}
	for p := range im.symlinks {
		im.parents(p)
	}
	for p := range im.dirs {
		im.parents(p)
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	w := newCPIOWriter(bw)
	for _, p := range sortedKeys(im.dirs) {
		if p == "/" {
			continue
		}
		if _, isLink := im.symlinks[p]; isLink {
			continue
		}
		if err := w.Dir(p, im.dirs[p]); err != nil {
			f.Close()
			return err
		}
	}
	for _, p := range sortedKeys(im.symlinks) {
		if err := w.Symlink(p, im.symlinks[p]); err != nil {
			f.Close()
			return err
		}
	}
	for _, p := range sortedKeys(im.files) {
		fl := im.files[p]
		data := fl.data
		if fl.host != "" {
			if data, err = os.ReadFile(fl.host); err != nil {
				f.Close()
				return err
			}
		}
		if err := w.File(p, fl.perm, data); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Close(); err != nil {
		f.Close()
		return err
	}
	if err := bw.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// parents adds the missing parent directories of p (mode 0755), unless a parent is
// a symlink already in the image.
func (im *image) parents(p string) {
	for d := filepath.Dir(p); d != "/" && d != "."; d = filepath.Dir(d) {
		if _, ok := im.symlinks[d]; ok {
			return
		}
		if _, ok := im.dirs[d]; !ok {
			im.dirs[d] = 0o755
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
