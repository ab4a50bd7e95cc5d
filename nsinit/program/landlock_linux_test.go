package program

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/kernel"
	"github.com/agentbox/agentbox/internal/seccomp"
	"github.com/agentbox/agentbox/mounts"
)

// TestLandlockPathSockets: the compiled ruleset of a plan with DenyPathSockets,
// entered by the Go runner on a thread of its own, refuses a connect(2) to a
// socket made outside it (EACCES) but beneath a grant; the thread's own sockets
// work anywhere, and a file still moves between directories (REFER allowed). On a
// kernel without Landlock ABI 9 (the launcher never asks for it there) the same
// program stops at the ruleset instead of running without it.
func TestLandlockPathSockets(t *testing.T) {
	dir := t.TempDir()
	granted, other := filepath.Join(dir, "granted"), filepath.Join(dir, "other")
	for _, d := range []string{granted, other, filepath.Join(dir, "a"), filepath.Join(dir, "b")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "a", "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// Made outside the domain, as a host daemon's are; one granted by its own path
	// (--allow-socket of a socket outside /tmp and /run).
	handed := filepath.Join(other, "handed.sock")
	for _, s := range []string{filepath.Join(granted, "g.sock"), filepath.Join(other, "o.sock"), handed} {
		fd := listenAt(t, s)
		t.Cleanup(func() { unix.Close(fd) })
	}
	done := make(chan []string)
	go func() {
		// Never unlocked: the thread ends with the goroutine, its domain with it.
		runtime.LockOSThread()
		done <- inDomain(mounts.Plan{DenyPathSockets: true, PathSocketGrants: []string{granted, handed}}, dir)
	}()
	bad := <-done
	if !kernel.CanDenyPathSockets() {
		// EINVAL: a Landlock without the access right; ENOSYS or EOPNOTSUPP: none at
		// all (5.10, or not enabled at boot).
		stopped := len(bad) == 1 && (strings.Contains(bad[0], "create the Landlock ruleset: invalid argument") ||
			strings.Contains(bad[0], "create the Landlock ruleset: function not implemented") ||
			strings.Contains(bad[0], "create the Landlock ruleset: operation not supported"))
		if !stopped {
			t.Errorf("Landlock ABI %d: want the program to stop at the ruleset (EINVAL, ENOSYS or EOPNOTSUPP), got %q", kernel.LandlockABI(), bad)
		}
		return
	}
	for _, b := range bad {
		t.Error(b)
	}
}

// inDomain enters the plan's compiled ruleset on the calling thread and returns
// what it found wrong there.
func inDomain(plan mounts.Plan, dir string) []string {
	fds, err := OpenFds()
	if err != nil {
		return []string{err.Error()}
	}
	p, err := New(0, 1<<16, 0, fds, KernelFeatures())
	if err != nil {
		return []string{err.Error()}
	}
	defer unix.Munmap(p.Mem)
	p.root = p.FdOp(opDesc{step: "open /"}, unix.SYS_OPENAT, uintptr(atFDCWD), p.Str("/"), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	ruleset := p.landlockRuleset(plan)
	p.CloseFd(p.root)
	p.op(opDesc{step: "no_new_privs"}, unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
	if err := p.dropPrivileges(ruleset, false, seccomp.Rules{}); err != nil {
		return []string{err.Error()}
	}
	if _, step, err := p.RunUntil(0, p.A.Nops, nil); err != nil {
		return []string{fmt.Sprintf("%s: %v", step, err)}
	}
	var bad []string
	try := func(what, path string, want error) {
		if err := connectTo(path); !errors.Is(err, want) && (want != nil || err != nil) {
			bad = append(bad, fmt.Sprintf("%s: connect %s: %v, want %v", what, path, err, want))
		}
	}
	try("granted, made outside", filepath.Join(dir, "granted", "g.sock"), nil)
	try("not granted, made outside", filepath.Join(dir, "other", "o.sock"), unix.EACCES)
	try("granted by its own path", filepath.Join(dir, "other", "handed.sock"), nil)
	own := filepath.Join(dir, "other", "own.sock")
	if fd, err := listen(own); err != nil {
		bad = append(bad, "bind inside: "+err.Error())
	} else {
		try("made inside", own, nil)
		unix.Close(fd)
	}
	if err := unix.Rename(filepath.Join(dir, "a", "f"), filepath.Join(dir, "b", "f")); err != nil {
		bad = append(bad, "rename across directories: "+err.Error())
	}
	return bad
}

func listenAt(t *testing.T, path string) int {
	t.Helper()
	fd, err := listen(path)
	if err != nil {
		t.Fatal(err)
	}
	return fd
}

func listen(path string) (int, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if err := unix.Listen(fd, 4); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

func connectTo(path string) error {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Connect(fd, &unix.SockaddrUnix{Name: path})
}
