package bwrapcheck

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/internal/hostpath"
	"github.com/agentbox/agentbox/internal/termsafe"
	"github.com/agentbox/agentbox/internal/trustedexec"
)

// EnvVar names the environment variable that selects the bwrap binary instead of
// the one on PATH.
const EnvVar = "AGENTBOX_BWRAP"

// DefaultTimeout bounds "bwrap --version". It runs in microseconds; a binary that
// takes seconds is not a bwrap agentbox should trust with the sandbox.
const DefaultTimeout = 5 * time.Second

// maxOutput bounds what is read from --version; the real output is one short line.
const maxOutput = 64 << 10

// Binary is a bwrap binary that passed the checks.
type Binary struct {
	Path    string  // absolute path, as found; for messages and argv[0]
	Version Version // as reported by --version
	// File is the checked file, open O_PATH and close-on-exec: the launch executes
	// it (/proc/self/fd/N), never Path again, which may name another file by then.
	// Close releases it.
	File *os.File
	// real is File's path with every link resolved, links the links the walk
	// followed to it (open).
	real  string
	links []string
}

// Close closes File.
func (b Binary) Close() error {
	if b.File == nil {
		return nil
	}
	return b.File.Close()
}

// Error is a refusal: which binary and why it will not be used.
type Error struct {
	Path   string // the binary as found or named; "bwrap" when none was found
	Reason string // one line, for the user
	Err    error  // the underlying error, if any
}

func (e *Error) Error() string {
	if e.Path == "" { // none found: the reason names what was looked for
		return e.Reason
	}
	return fmt.Sprintf("bwrap %s: %s", quote(e.Path), e.Reason)
}

func (e *Error) Unwrap() error { return e.Err }

// quote keeps a hostile path on one line in messages, free of terminal controls.
func quote(s string) string { return termsafe.Quote(s) }

// Lookup finds bwrap (Find) and checks it (Check) with DefaultTimeout. writable are
// the host directories the session's sandbox can write (see Find); the file Check
// opened, and every link on its way, are checked against them again, as what Find
// saw may have changed since. The caller closes the Binary.
func Lookup(writable ...string) (Binary, error) {
	path, err := Find(writable...)
	if err != nil {
		return Binary{}, err
	}
	b, err := Check(path, DefaultTimeout)
	if err != nil {
		return Binary{}, err
	}
	writable, granted, err := hostpath.WithGranted(writable...)
	if err != nil {
		b.Close()
		return Binary{}, &Error{Path: path, Reason: err.Error(), Err: err}
	}
	for _, p := range append([]string{b.real}, b.links...) {
		root, ok := hostpath.InsideWritable(p, writable...)
		if !ok {
			root = granted.Holding(p)
		}
		if ok || root != "" {
			b.Close()
			return Binary{}, &Error{Path: path, Reason: fmt.Sprintf("resolves through %s, inside %s (by that or another name), which a session can write: it could replace it, and agentbox runs it on the host; install bwrap outside it", quote(p), quote(root))}
		}
	}
	return b, nil
}

// Find returns the bwrap to use: $AGENTBOX_BWRAP when set (it must be absolute and
// not inside one of writable nor a directory an earlier session was given
// writable, hostpath.WithGranted), else
// "bwrap" on PATH as hostpath.LookPath finds it: never in one of writable, in a Git
// working tree, through a relative PATH entry or in a directory others can write,
// since the launcher runs it on the host with the whole sandbox's argv. It does not
// check the binary.
func Find(writable ...string) (string, error) {
	if p := os.Getenv(EnvVar); p != "" {
		if !filepath.IsAbs(p) {
			return "", &Error{Path: p, Reason: EnvVar + " must be an absolute path"}
		}
		writable, granted, err := hostpath.WithGranted(writable...)
		if err != nil {
			return "", &Error{Path: p, Reason: err.Error(), Err: err}
		}
		root, ok := hostpath.InsideWritable(filepath.Clean(p), writable...)
		if !ok {
			root = granted.Holding(p)
		}
		if ok || root != "" {
			return "", &Error{Path: p, Reason: fmt.Sprintf("lies inside %s (by that or another name), which a session can write: it could replace it, and agentbox runs it on the host; install bwrap outside it", termsafe.Quote(root))}
		}
		return filepath.Clean(p), nil
	}
	p, err := hostpath.LookPath("bwrap", writable...)
	if err != nil {
		return "", &Error{Err: err,
			Reason: fmt.Sprintf("%v: install bubblewrap %s or newer, or set %s to its absolute path", err, Minimum, EnvVar)}
	}
	return p, nil
}

// Check decides whether the binary at path may run the sandbox. It opens the file
// once (open: every directory and link on the way, and the file, owned by root or
// the launching user and writable by no one else) and looks at the opened file's
// mode first: setuid and setgid binaries are refused without running them, and so
// is a file others may write. Otherwise it runs only "--version" of that very file,
// waits at most timeout, and refuses versions older than Minimum and output it
// cannot parse. An accepted Binary holds the file open (Binary.File): what runs the
// sandbox is what was checked.
func Check(path string, timeout time.Duration) (Binary, error) {
	o, err := trustedexec.Open(path, "bwrap")
	if reason, ok := isUntrusted(err); ok {
		return Binary{}, &Error{Path: path, Reason: reason, Err: err}
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return Binary{}, &Error{Path: path, Err: err,
			Reason: fmt.Sprintf("not found: install bubblewrap %s or newer, or point %s at it", Minimum, EnvVar)}
	case err != nil:
		return Binary{}, &Error{Path: path, Reason: fmt.Sprintf("cannot open: %v", err), Err: err}
	}
	b, err := checkOpened(path, o, timeout)
	if err != nil {
		o.File.Close()
		return Binary{}, err
	}
	return b, nil
}

// checkOpened is Check on the file open resolved.
func checkOpened(path string, o *trustedexec.Opened, timeout time.Duration) (Binary, error) {
	fi, err := o.File.Stat()
	switch {
	case err != nil:
		return Binary{}, &Error{Path: path, Reason: fmt.Sprintf("cannot stat: %v", err), Err: err}
	case !fi.Mode().IsRegular():
		return Binary{}, &Error{Path: path, Reason: "not a regular file"}
	case fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0:
		return Binary{}, &Error{Path: path,
			Reason: "is setuid or setgid: agentbox runs bwrap unprivileged in a user namespace and refuses a setuid build, whose setup bugs become privilege escalations"}
	case fi.Mode().Perm()&0o111 == 0:
		return Binary{}, &Error{Path: path, Reason: "not executable"}
	case fi.Mode().Perm()&0o022 != 0:
		return Binary{}, &Error{Path: path, Reason: fmt.Sprintf("is writable by others than its owner (mode %04o): another user could replace its contents; chmod go-w it", fi.Mode().Perm())}
	}

	out, err := runVersion(o.File, path, timeout)
	if err != nil {
		return Binary{}, err
	}
	v, err := ParseVersion(out)
	if err != nil {
		return Binary{}, &Error{Path: path, Err: err,
			Reason: fmt.Sprintf("cannot parse its --version output %q: %v", firstLine(out), err)}
	}
	if !v.Supported() {
		return Binary{}, &Error{Path: path, Reason: fmt.Sprintf(
			"bubblewrap %s is too old: agentbox needs bubblewrap %s or newer, because older releases have %s (a symlink traversal during sandbox setup); install a newer bwrap or use --backend native",
			v, Minimum, Advisory)}
	}
	return Binary{Path: path, Version: v, File: o.File, real: o.Real, links: o.Links}, nil
}

// ExecPath is the path that executes the file open at descriptor fd, of the process
// that executes it (trustedexec.ExecPath).
func ExecPath(fd int) string { return trustedexec.ExecPath(fd) }

// versionFD is the descriptor the file has in the --version process.
const versionFD = 3

// runVersion runs "--version" of the file open at f (path names it in messages and
// argv[0]) with no input and a bounded wait, and returns its standard output.
func runVersion(f *os.File, path string, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, ExecPath(versionFD), "--version")
	cmd.Args[0] = path
	cmd.ExtraFiles = []*os.File{f} // descriptor versionFD
	// Pipes of our own, given as files: the binary writes into them directly and
	// Wait returns when it exits. With writers, exec copies the output on a
	// goroutine that a loaded machine can leave unscheduled past any delay allowed
	// after the exit, and a good bwrap was refused for it.
	stdout, stdoutW, err := os.Pipe()
	if err != nil {
		return "", &Error{Path: path, Reason: fmt.Sprintf("cannot run --version: %v", err), Err: err}
	}
	defer stdout.Close()
	stderr, stderrW, err := os.Pipe()
	if err != nil {
		stdoutW.Close()
		return "", &Error{Path: path, Reason: fmt.Sprintf("cannot run --version: %v", err), Err: err}
	}
	defer stderr.Close()
	cmd.Stdout, cmd.Stderr = stdoutW, stderrW
	err = cmd.Start()
	stdoutW.Close()
	stderrW.Close()
	if err == nil {
		err = cmd.Wait()
	}
	out, errOut := drain(stdout), drain(stderr)
	var exitErr *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return "", &Error{Path: path, Err: ctx.Err(),
			Reason: fmt.Sprintf("--version did not finish within %s", timeout)}
	case errors.As(err, &exitErr):
		msg := firstLine(errOut)
		if msg == "" {
			msg = firstLine(out)
		}
		return "", &Error{Path: path, Err: err,
			Reason: fmt.Sprintf("--version failed (%v): %q", exitErr.ProcessState, msg)}
	case err != nil:
		return "", &Error{Path: path, Reason: fmt.Sprintf("cannot run --version: %v", err), Err: err}
	}
	return out, nil
}

// drain returns what the pipe holds, up to maxOutput bytes, once its writer has
// exited: everything the binary wrote is in the pipe's buffer by then. It never
// waits: a child of the binary that keeps the pipe open ends the read where the
// buffer does (EAGAIN on Go's non-blocking pipe), and so does any error.
func drain(r *os.File) string {
	rc, err := r.SyscallConn()
	if err != nil {
		return ""
	}
	var out []byte
	buf := make([]byte, 4096)
	for len(out) < maxOutput {
		n := 0
		if err := rc.Read(func(fd uintptr) bool {
			n, err = syscall.Read(int(fd), buf)
			return true // one attempt: never wait for more
		}); err != nil || n <= 0 {
			break
		}
		out = append(out, buf[:min(n, maxOutput-len(out))]...)
	}
	return string(out)
}

// isUntrusted reports whether err is open's refusal, and its reason.
func isUntrusted(err error) (string, bool) {
	var u *trustedexec.Untrusted
	if errors.As(err, &u) {
		if u.Served {
			return u.Reason + " or use --backend native", true
		}
		return u.Reason, true
	}
	return "", false
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	if len(line) > 200 {
		line = line[:200] + "…"
	}
	return line
}
