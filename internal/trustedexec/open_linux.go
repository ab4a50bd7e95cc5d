package trustedexec

import (
	"fmt"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// maxLinks bounds the symbolic links one resolution follows, as the kernel's own
// path walk does (ELOOP after 40).
const maxLinks = 40

// walker resolves one path from "/", one component at a time, each relative to
// the descriptor of the directory it was looked up in.
type walker struct {
	what  string // the program, for messages: "bwrap", "the init binary"
	uid   uint32
	stack []dirFD // the directories from "/" to the current one
	links []string
}

type dirFD struct {
	fd   int
	path string
}

// Open resolves name (absolute) the way the kernel would, following symbolic
// links, but one component at a time through O_PATH|O_NOFOLLOW descriptors, so that
// it checks, and then holds, exactly what it resolved: every entry on the way (each
// directory, each link, the file) must lie on a filesystem whose owners are the
// kernel's or root's word (served.go) and be owned by root or by the launching user,
// and every directory it looks an entry up in must be writable by its owner only,
// or sticky (/tmp: there only an entry's owner, the directory's owner and root may
// rename or remove the entry, and the entry's owner is checked). Anyone else who
// could write one of them could put another program there. what names the program
// in refusals ("bwrap"), which are *Untrusted. The result is open O_PATH and
// close-on-exec; the caller checks the file itself (File: a regular file, its mode).
func Open(name, what string) (*Opened, error) {
	if !path.IsAbs(name) {
		return nil, fmt.Errorf("%s: not an absolute path", name)
	}
	w := &walker{what: what, uid: uint32(os.Geteuid())}
	defer w.closeAll()
	root, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open /: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(root, &st); err != nil {
		unix.Close(root)
		return nil, fmt.Errorf("stat /: %w", err)
	}
	if err := w.push(root, "/", &st); err != nil {
		return nil, err
	}
	todo := strings.Split(name, "/")
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			w.pop()
			continue
		}
		cur := w.stack[len(w.stack)-1]
		p := path.Join(cur.path, c)
		fd, err := unix.Openat(cur.fd, c, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, &os.PathError{Op: "open", Path: p, Err: err}
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return nil, &os.PathError{Op: "stat", Path: p, Err: err}
		}
		if err := w.owned(fd, p, &st); err != nil {
			unix.Close(fd)
			return nil, err
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			target, err := w.follow(fd, p)
			unix.Close(fd)
			if err != nil {
				return nil, err
			}
			if path.IsAbs(target) {
				w.toRoot()
			}
			todo = append(strings.Split(target, "/"), todo...)
		case unix.S_IFDIR:
			if err := w.push(fd, p, &st); err != nil {
				return nil, err
			}
		default:
			if rest(todo) {
				unix.Close(fd)
				return nil, &os.PathError{Op: "open", Path: p, Err: unix.ENOTDIR}
			}
			return &Opened{File: os.NewFile(uintptr(fd), p), Real: p, Links: w.links}, nil
		}
	}
	return nil, &Untrusted{Reason: "not a regular file"}
}

// rest reports whether todo still names a component other than "" and ".".
func rest(todo []string) bool {
	for _, c := range todo {
		if c != "" && c != "." {
			return true
		}
	}
	return false
}

// owned refuses an entry owned by anyone but root or the launching user, and one
// on a filesystem whose word on owners cannot be taken (served_linux.go).
func (w *walker) owned(fd int, p string, st *unix.Stat_t) error {
	if err := w.served(fd, p); err != nil {
		return err
	}
	if st.Uid == 0 || st.Uid == w.uid {
		return nil
	}
	return &Untrusted{Reason: fmt.Sprintf("%s is owned by uid %d, neither you nor root: that user could put another %s there; install %s where only you or root can write", quote(p), st.Uid, w.what, w.what)}
}

// push checks a directory the walk will look entries up in (fd, at p, with status
// st) and makes it the current one; it owns fd from here on.
func (w *walker) push(fd int, p string, st *unix.Stat_t) error {
	if err := w.owned(fd, p, st); err != nil {
		unix.Close(fd)
		return err
	}
	if who := Writers(st.Mode); who != "" && st.Mode&unix.S_ISVTX == 0 {
		unix.Close(fd)
		return &Untrusted{Reason: fmt.Sprintf("the directory %s is writable by %s (mode %04o): another user could replace %s there; make it writable by its owner only (chmod go-w) or install %s elsewhere", quote(p), who, st.Mode&0o7777, w.what, w.what)}
	}
	w.stack = append(w.stack, dirFD{fd: fd, path: p})
	return nil
}

// pop makes the parent the current directory; ".." of "/" is "/".
func (w *walker) pop() {
	if n := len(w.stack); n > 1 {
		unix.Close(w.stack[n-1].fd)
		w.stack = w.stack[:n-1]
	}
}

// toRoot makes "/" the current directory again, for an absolute link.
func (w *walker) toRoot() {
	for len(w.stack) > 1 {
		w.pop()
	}
}

// follow reads the link open at fd (at p), counting it against maxLinks.
func (w *walker) follow(fd int, p string) (string, error) {
	if len(w.links) >= maxLinks {
		return "", &os.PathError{Op: "open", Path: p, Err: unix.ELOOP}
	}
	w.links = append(w.links, p)
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(fd, "", buf)
	if err != nil {
		return "", &os.PathError{Op: "readlink", Path: p, Err: err}
	}
	if n == len(buf) {
		return "", &os.PathError{Op: "readlink", Path: p, Err: unix.ENAMETOOLONG}
	}
	return string(buf[:n]), nil
}

func (w *walker) closeAll() {
	for _, d := range w.stack {
		unix.Close(d.fd)
	}
	w.stack = nil
}
