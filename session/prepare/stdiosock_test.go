package prepare

import (
	"io"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/backend"
)

// TestGuardStdioSockets: a socket is relayed both ways, the caller's socket is never
// handed on, and once stopped the input relay takes nothing more of what the
// caller's stream brings.
func TestGuardStdioSockets(t *testing.T) {
	pair := func() (caller, launcher *os.File) {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		caller, launcher = os.NewFile(uintptr(fds[0]), "caller"), os.NewFile(uintptr(fds[1]), "launcher")
		t.Cleanup(func() { caller.Close(); launcher.Close() })
		return caller, launcher
	}
	inCaller, in := pair()
	outCaller, out := pair()
	s, r, err := GuardStdio(backend.Stdio{Stdin: in, Stdout: out, Stderr: out})
	if err != nil {
		t.Fatal(err)
	}
	if s.Stdin == in || s.Stdout == out || s.Stderr != s.Stdout || isSocket(s.Stdin) || isSocket(s.Stdout) {
		t.Fatalf("sockets handed on (stderr the same socket: one pipe): %+v", s)
	}
	if _, err := inCaller.Write([]byte("before")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 6)
	if _, err := io.ReadFull(s.Stdin, got); err != nil || string(got) != "before" {
		t.Fatalf("relayed input: %q, %v", got, err)
	}
	if _, err := io.WriteString(s.Stdout, "output"); err != nil {
		t.Fatal(err)
	}
	s.Stdout.Close() // the command's copy
	s.Stdin.Close()
	r.Stop()
	if _, err := io.ReadFull(outCaller, got); err != nil || string(got) != "output" {
		t.Errorf("relayed output: %q, %v", got, err)
	}
	if _, err := inCaller.Write([]byte("after")); err != nil {
		t.Fatal(err)
	}
	got = make([]byte, 5)
	if n, err := unix.Read(int(in.Fd()), got); err != nil || string(got[:n]) != "after" {
		t.Errorf("after the relay stopped, the caller's input reads %q, %v: taken by the relay", got[:n], err)
	}
}

// TestGuardStdioListeningSocket: a standard stream that is a listening socket (a
// service started by socket activation, inetd's wait mode) is refused with a line
// saying why: relayed, the command's reads waited for bytes that never come (until a
// connection arrived, then ended); handed on, the sandbox would take the service's
// connections and could stop it listening for the caller.
func TestGuardStdioListeningSocket(t *testing.T) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	l := os.NewFile(uintptr(fd), "listener")
	defer l.Close()
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: "@agentbox-stdio-listen-test"}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 1); err != nil {
		t.Fatal(err)
	}
	for _, row := range []struct {
		name string
		s    backend.Stdio
	}{
		{"input", backend.Stdio{Stdin: l}},
		{"output", backend.Stdio{Stdout: l}},
	} {
		s, r, err := GuardStdio(row.s)
		if err == nil {
			r.Stop()
			t.Errorf("standard %s, a listening socket: not refused (%+v)", row.name, s)
			continue
		}
		if !strings.Contains(err.Error(), "listening socket") {
			t.Errorf("standard %s: the refusal does not say why: %v", row.name, err)
		}
	}
}
