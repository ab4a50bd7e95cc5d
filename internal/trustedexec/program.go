package trustedexec

import (
	"fmt"
	"io/fs"
)

// Program opens name as Open does (what names it in refusals) and refuses the
// file itself unless it is a regular file, executable, not setuid or setgid,
// and writable by its owner only: another user who may write it could change
// what runs as the file, whatever the walk held. The caller executes
// ExecPath of the returned file and closes it.
func Program(name, what string) (*Opened, error) {
	o, err := Open(name, what)
	if err != nil {
		return nil, err
	}
	fi, err := o.File.Stat()
	reason := ""
	switch {
	case err != nil:
		reason = fmt.Sprintf("cannot stat %s: %v", quote(o.Real), err)
	case !fi.Mode().IsRegular():
		reason = fmt.Sprintf("%s is not a regular file", quote(o.Real))
	case fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0:
		reason = fmt.Sprintf("%s is setuid or setgid: %s runs as you, unprivileged; install a copy without those bits", quote(o.Real), what)
	case fi.Mode().Perm()&0o111 == 0:
		reason = fmt.Sprintf("%s is not executable", quote(o.Real))
	case Writers(uint32(fi.Mode().Perm())) != "":
		reason = fmt.Sprintf("%s is writable by %s (mode %04o): another user could change %s there; chmod go-w it", quote(o.Real), Writers(uint32(fi.Mode().Perm())), fi.Mode().Perm(), what)
	}
	if reason != "" {
		o.File.Close()
		return nil, &Untrusted{Reason: reason}
	}
	return o, nil
}
