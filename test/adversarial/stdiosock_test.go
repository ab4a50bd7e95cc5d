package adversarial

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
)

// A standard stream that is a socket (a service's journal stream, a Go API
// caller's socket pair) is one socket for the command, the launcher and the
// launcher's caller: shutdown(2) on it reaches them all and outlives the session.
// The command shuts its three streams down and leaves a process behind, so that the
// launcher has a line of its own to write after the session; the launcher must end
// normally with that line delivered, and the caller's sockets must still carry data
// both ways afterwards. The row runs with the other standard-stream rows, on every
// door (TestEscapes, TestStdioDoors).
func init() {
	probes["shutdown"] = probeShutdown
	stdioAttacks = append(stdioAttacks, attack{
		name: "socket standard streams shut down",
		script: `
		echo DONE
		sleep 300 &
		"$PROBE" shutdown`,
		run: socketStreams})
	attacks = append(attacks, stdioAttacks[len(stdioAttacks)-1])
}

// probeShutdown shuts down both directions of descriptors 0, 1 and 2; it can print
// nothing after, so the test judges the sockets from outside.
func probeShutdown([]string) int {
	for fd := 0; fd < 3; fd++ {
		_ = unix.Shutdown(fd, unix.SHUT_RDWR)
	}
	return 0
}

// socketStreams launches cmd with a socket pair's end as standard input and another
// as standard output and error, then checks that both still work for the caller.
func socketStreams(t *testing.T, x *target, cmd *exec.Cmd) sandboxtest.Result {
	in := socketPair(t)  // [0] the caller's, [1] the launcher's standard input
	out := socketPair(t) // [0] the caller's, [1] the launcher's standard output and error
	cmd.Stdin, cmd.Stdout, cmd.Stderr = in[1], out[1], out[1]
	err := cmd.Run()
	code := 0
	if err != nil {
		code = 999
		if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() >= 0 {
			code = ee.ExitCode()
		}
	}
	// The caller's output socket still sends, and its input socket still receives.
	if _, err := out[1].Write([]byte("caller-after\n")); err != nil {
		t.Errorf("the caller's standard output socket after the session: %v (shut down from inside)", err)
	}
	if _, err := in[0].Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	if n, err := unix.Read(int(in[1].Fd()), b[:]); n != 1 || err != nil {
		t.Errorf("the caller's standard input socket after the session read %d bytes, %v (shut down from inside)", n, err)
	}
	out[1].Close()
	got := readAll(out[0])
	if !strings.Contains(got, "killed 1 process left running") {
		t.Errorf("the launcher's own line after the session is missing:\n%s", got)
	}
	return sandboxtest.Result{Stdout: got, Code: code}
}

// socketPair is a connected pair of stream sockets, closed with the test.
func socketPair(t *testing.T) [2]*os.File {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	p := [2]*os.File{os.NewFile(uintptr(fds[0]), "caller"), os.NewFile(uintptr(fds[1]), "launcher")}
	t.Cleanup(func() { p[0].Close(); p[1].Close() })
	return p
}

// readAll reads f to its end.
func readAll(f *os.File) string {
	var sb strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := f.Read(buf)
		sb.Write(buf[:n])
		if err != nil || n == 0 {
			return sb.String()
		}
	}
}
