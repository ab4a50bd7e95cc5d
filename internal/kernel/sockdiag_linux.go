package kernel

import (
	"bytes"
	"encoding/binary"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/sockdiag"
)

// boundFile is a path socket of this process's network namespace as the kernel's
// sock_diag reports it: the name bind(2) was given, and the file that bind made
// (its device and inode), which stays the socket's file whatever it is renamed to
// or linked as since. The socket table (/proc/net/unix) has only the name.
type boundFile struct {
	Inode uint64 // the socket's own inode, as in the socket table
	Name  string
	Dev   uint64 // as stat(2) reports st_dev
	Ino   uint32 // the file's inode number, its low 32 bits (all sock_diag gives)
}

// unix_diag's request and attributes (linux/unix_diag.h).
const (
	udiagShowName = 0x1
	udiagShowVFS  = 0x2
	unixDiagName  = 0
	unixDiagVFS   = 1
)

// boundFiles asks sock_diag for every bound path socket of this process's network
// namespace, with the file its bind made.
func boundFiles() ([]boundFile, error) {
	body := make([]byte, 24) // unix_diag_req
	ne := binary.NativeEndian
	body[0] = unix.AF_UNIX
	ne.PutUint32(body[4:], 0xffffffff) // every state
	ne.PutUint32(body[12:], udiagShowName|udiagShowVFS)
	var out []boundFile
	err := sockdiag.Dump(body, func(b []byte) {
		if f, ok := parseDiag(b); ok {
			out = append(out, f)
		}
	})
	return out, err
}

// parseDiag reads one unix_diag_msg with its attributes; ok only for a socket
// bound to a path (not abstract, not unbound) whose file sock_diag reports.
func parseDiag(b []byte) (boundFile, bool) {
	const msgLen = 16 // family, type, state, pad, inode, cookie[2]
	if len(b) < msgLen {
		return boundFile{}, false
	}
	ne := binary.NativeEndian
	f := boundFile{Inode: uint64(ne.Uint32(b[4:]))}
	var name, vfs bool
	for a := b[msgLen:]; len(a) >= 4; {
		l := int(ne.Uint16(a))
		if l < 4 || l > len(a) {
			break
		}
		data := a[4:l]
		switch ne.Uint16(a[2:]) {
		case unixDiagName:
			if len(data) > 0 && data[0] != 0 {
				if i := bytes.IndexByte(data, 0); i >= 0 {
					data = data[:i]
				}
				f.Name, name = string(data), true
			}
		case unixDiagVFS:
			if len(data) >= 8 {
				// The kernel's own dev_t (major << 20 | minor), not stat(2)'s.
				kdev := ne.Uint32(data[4:])
				f.Ino, f.Dev, vfs = ne.Uint32(data), unix.Mkdev(kdev>>20, kdev&0xfffff), true
			}
		}
		a = a[min((l+3)&^3, len(a)):]
	}
	return f, name && vfs
}
