package adversarial

import (
	"fmt"
	"maps"
	"net"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestSocketFamilies: under a restricted network (--offline, --allow-net) the
// command creates sockets only of the families the network namespace confines.
// AF_VSOCK, which no network namespace scopes, would reach the hypervisor and the
// host's vsock services; it fails with EAFNOSUPPORT (through x32's numbers too), as
// does any other family (AF_ALG), and io_uring_setup, which creates sockets the
// filter never sees, fails with ENOSYS. Unix, inet and netlink sockets work as
// before (loopback TCP, an ip-style link dump). With the host's network every
// answer is the host's own. Under --nested-sandbox, in namespaces the command made
// itself, the rule still holds. Every backend, each init, and the Go API's door.
func TestSocketFamilies(t *testing.T) {
	pr := probe(t)
	host := sandboxtest.NewBox(t, "native")
	hc := testenv.Command(t, host.Home, pr, "sockets")
	hc.Env = append(hc.Env, probeEnv+"=1")
	hr := sandboxtest.Run(hc)
	if hr.Code != 0 {
		t.Fatalf("probe on the host:\n%s", hr)
	}
	onHost := probeLines(hr.Stdout)
	if onHost["socket vsock"] != "ok" && onHost["socket alg"] != "ok" {
		testenv.SkipKernel(t, "AF_VSOCK", "the host itself creates neither a vsock nor an alg socket (%q, %q), so their refusal cannot be told apart",
			onHost["socket vsock"], onHost["socket alg"])
	}
	runners := everyRunner(t)
	restricted := map[string]string{
		"socket vsock": "EAFNOSUPPORT", "socket vsock|junk<<32": "EAFNOSUPPORT", "socketpair vsock": "EAFNOSUPPORT",
		"socket alg": "EAFNOSUPPORT", "io_uring_setup": "ENOSYS",
		"socketpair unix": "ok", "tcp loopback": "ok", "netlink links": "ok lo",
	}
	if runtime.GOARCH == "amd64" {
		restricted["x32 socket vsock"] = "EAFNOSUPPORT"
	}
	// The nested row runs the probe in a user and network namespace of its own made
	// inside the session (loopback brought up with ip): the outer filter still holds,
	// and the nested namespace's owner may make packet sockets in it.
	nested := `unshare -Urn sh -c 'ip link set lo up && exec "$PROBE" sockets'`
	modes := []struct {
		args   []string
		script string
	}{
		{[]string{"--offline"}, `"$PROBE" sockets`},
		{[]string{"--allow-net", "example.test"}, `"$PROBE" sockets`},
		{[]string{"--offline", "--nested-sandbox"}, nested},
		{nil, `"$PROBE" sockets`},
	}
	for _, runner := range runners {
		for _, mode := range modes {
			if runner == sandboxtest.GoAPI && slices.Contains(mode.args, "--allow-net") {
				continue // the Go API has no --allow-net
			}
			name := runner + "/" + strings.Join(append([]string{"net"}, mode.args...), " ")
			t.Run(name, func(t *testing.T) {
				b := sandboxtest.NewBox(t, runner)
				args := []string{"--no-git-save"}
				if runner != sandboxtest.GoAPI {
					args = append(args, "--no-record") // the Go API records nothing
				}
				cmd := b.Command(b.Repo, append(args, mode.args...), mode.script)
				cmd.Env = append(cmd.Env, "PROBE="+pr, probeEnv+"=1")
				r := sandboxtest.Run(cmd)
				if r.Code != 0 {
					t.Fatalf("probe in the sandbox:\n%s", r)
				}
				got := probeLines(r.Stdout)
				for _, k := range slices.Sorted(maps.Keys(onHost)) {
					want := onHost[k]
					if w, ok := restricted[k]; ok && mode.args != nil {
						want = w
					}
					if k == "socket packet" && mode.script == nested {
						want = "ok"
					}
					if got[k] != want {
						t.Errorf("%s: %q, want %q", k, got[k], want)
					}
				}
				if t.Failed() {
					t.Logf("host:\n%s\nsandbox:\n%s", hr.Stdout, r)
				}
			})
		}
	}
}

func probeLines(out string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if k, v, ok := strings.Cut(line, ": "); ok {
			m[k] = v
		}
	}
	return m
}

// probeSockets creates one socket of each kind, through each call, and prints
// "what: ok" or "what: ERRNO" for each.
func probeSockets([]string) int {
	const junk = 0xdead << 32
	say := func(what string, e unix.Errno) {
		if e == 0 {
			fmt.Printf("%s: ok\n", what)
			return
		}
		fmt.Printf("%s: %s\n", what, unix.ErrnoName(e))
	}
	mk := func(what string, nr, family, typ, proto uintptr) {
		var pair [2]int32
		fd, _, e := unix.RawSyscall6(nr, family, typ|unix.SOCK_CLOEXEC, proto, uintptr(unsafe.Pointer(&pair)), 0, 0)
		say(what, e)
		if e == 0 && nr == unix.SYS_SOCKET {
			unix.Close(int(fd))
		}
	}
	mk("socket vsock", unix.SYS_SOCKET, unix.AF_VSOCK, unix.SOCK_STREAM, 0)
	mk("socket vsock|junk<<32", unix.SYS_SOCKET, unix.AF_VSOCK|junk, unix.SOCK_STREAM, 0)
	mk("socketpair vsock", unix.SYS_SOCKETPAIR, unix.AF_VSOCK, unix.SOCK_STREAM, 0)
	mk("socket alg", unix.SYS_SOCKET, unix.AF_ALG, unix.SOCK_SEQPACKET, 0)
	if runtime.GOARCH == "amd64" {
		mk("x32 socket vsock", 0x40000000|unix.SYS_SOCKET, unix.AF_VSOCK, unix.SOCK_STREAM, 0)
	}
	mk("socket unix", unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_STREAM, 0)
	mk("socketpair unix", unix.SYS_SOCKETPAIR, unix.AF_UNIX, unix.SOCK_STREAM, 0)
	mk("socket inet6", unix.SYS_SOCKET, unix.AF_INET6, unix.SOCK_DGRAM, 0)
	mk("socket packet", unix.SYS_SOCKET, unix.AF_PACKET, unix.SOCK_DGRAM, 0)
	var params [120]byte // struct io_uring_params
	fd, _, e := unix.RawSyscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params)), 0)
	say("io_uring_setup", e)
	if e == 0 {
		unix.Close(int(fd))
	}
	fmt.Printf("tcp loopback: %s\n", tcpLoopback())
	fmt.Printf("netlink links: %s\n", netlinkLinks())
	return 0
}

// tcpLoopback connects to a listener of its own on 127.0.0.1.
func tcpLoopback() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err.Error()
	}
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		return err.Error()
	}
	c.Close()
	return "ok"
}

// netlinkLinks dumps the network interfaces over rtnetlink, as ip link does, and
// names them sorted.
func netlinkLinks() string {
	ifs, err := net.Interfaces() // RTM_GETLINK over NETLINK_ROUTE
	if err != nil {
		return err.Error()
	}
	var names []string
	for _, i := range ifs {
		names = append(names, i.Name)
	}
	slices.Sort(names)
	return "ok " + strings.Join(names, " ")
}
