package bwrapcheck

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/hostpath"
	"github.com/agentbox/agentbox/internal/termsafe"
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
	Path    string  // absolute path, as found
	Version Version // as reported by --version
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
// the host directories the session's sandbox can write (see Find).
func Lookup(writable ...string) (Binary, error) {
	path, err := Find(writable...)
	if err != nil {
		return Binary{}, err
	}
	return Check(path, DefaultTimeout)
}

// Find returns the bwrap to use: $AGENTBOX_BWRAP when set (it must be absolute and
// not inside one of writable), else
// "bwrap" on PATH as hostpath.LookPath finds it: never in one of writable, in a Git
// working tree, through a relative PATH entry or in a directory others can write,
// since the launcher runs it on the host with the whole sandbox's argv. It does not
// check the binary.
func Find(writable ...string) (string, error) {
	if p := os.Getenv(EnvVar); p != "" {
		if !filepath.IsAbs(p) {
			return "", &Error{Path: p, Reason: EnvVar + " must be an absolute path"}
		}
		if root, ok := hostpath.InsideWritable(filepath.Clean(p), writable...); ok {
			return "", &Error{Path: p, Reason: fmt.Sprintf("lies inside %s, which the sandbox can write: a session could replace it, and agentbox runs it on the host; install bwrap outside it", termsafe.Quote(root))}
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

// Check decides whether the binary at path may run the sandbox. It looks at the file's
// mode first and refuses setuid and setgid binaries without running them; otherwise
// it runs only "path --version", waits at most timeout, and refuses versions older
// than Minimum and output it cannot parse.
func Check(path string, timeout time.Duration) (Binary, error) {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return Binary{}, &Error{Path: path, Err: err,
			Reason: fmt.Sprintf("not found: install bubblewrap %s or newer, or point %s at it", Minimum, EnvVar)}
	case err != nil:
		return Binary{}, &Error{Path: path, Reason: fmt.Sprintf("cannot stat: %v", err), Err: err}
	case !fi.Mode().IsRegular():
		return Binary{}, &Error{Path: path, Reason: "not a regular file"}
	case fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0:
		return Binary{}, &Error{Path: path,
			Reason: "is setuid or setgid: agentbox runs bwrap unprivileged in a user namespace and refuses a setuid build, whose setup bugs become privilege escalations"}
	case fi.Mode().Perm()&0o111 == 0:
		return Binary{}, &Error{Path: path, Reason: "not executable"}
	}

	out, err := runVersion(path, timeout)
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
	return Binary{Path: path, Version: v}, nil
}

// runVersion runs "path --version" with no input and a bounded wait, and returns
// its standard output.
func runVersion(path string, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "--version")
	var stdout, stderr limitedBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// A child of the binary that keeps the output pipes open must not stretch the
	// wait: after the kill, give up on the pipes quickly.
	cmd.WaitDelay = 500 * time.Millisecond
	err := cmd.Run()
	var exitErr *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return "", &Error{Path: path, Err: ctx.Err(),
			Reason: fmt.Sprintf("--version did not finish within %s", timeout)}
	case errors.As(err, &exitErr):
		msg := firstLine(stderr.String())
		if msg == "" {
			msg = firstLine(stdout.String())
		}
		return "", &Error{Path: path, Err: err,
			Reason: fmt.Sprintf("--version failed (%v): %q", exitErr.ProcessState, msg)}
	case err != nil:
		return "", &Error{Path: path, Reason: fmt.Sprintf("cannot run --version: %v", err), Err: err}
	}
	return stdout.String(), nil
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	if len(line) > 200 {
		line = line[:200] + "…"
	}
	return line
}

// limitedBuffer keeps the first maxOutput bytes written to it and discards the rest,
// so a binary that floods its output cannot exhaust memory.
type limitedBuffer struct{ bytes.Buffer }

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := maxOutput - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
