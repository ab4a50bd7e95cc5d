package netproxy

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

const searchListChild = "AGENTBOX_NETPROXY_SEARCHLIST_CHILD"

// The proxy resolves with the host's own resolver configuration. With a search
// domain and ndots:5 (as Kubernetes pods have), Go's resolver would ask for an
// allowed x.example.com as x.example.com.corp.internal first, and a wildcard record
// of the internal zone would send the session to a host no rule names. The test
// runs the proxy's real resolver against a resolv.conf and a DNS server of its own,
// in a mount and network namespace of its own (so it needs root).
func TestDottedNameIgnoresSearchList(t *testing.T) {
	if os.Getenv(searchListChild) == "" {
		if os.Geteuid() != 0 {
			testenv.Skip(t, "a resolv.conf and port 53 of the test's own need root (CI runs as root)")
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestDottedNameIgnoresSearchList$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), searchListChild+"=1")
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWNET}
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestDottedNameIgnoresSearchList") {
			t.Fatalf("the test in its own namespaces: %v\n%s", err, out)
		}
		return
	}
	privateResolvConf(t, "nameserver 127.0.0.1\nsearch corp.internal\noptions ndots:5 timeout:2 attempts:2\n")
	dns := serveZone(t, map[string]netip.Addr{
		"x.example.com.corp.internal.": netip.MustParseAddr("203.0.113.66"), // the twin
		"y.example.com.":               netip.MustParseAddr("198.51.100.7"),
		"gitlab.corp.internal.":        netip.MustParseAddr("192.0.2.5"),
	})
	rules, err := ParseAll([]string{"x.example.com", "y.example.com", "gitlab"})
	if err != nil {
		t.Fatal(err)
	}
	srv := New(Config{Rules: rules, LocalAddrs: func() ([]netip.Addr, error) { return nil, nil }})
	defer srv.Close()
	ctx := context.Background()

	if addrs, err := srv.Decide(ctx, "x.example.com", 443); err == nil {
		t.Errorf("x.example.com, which has no record of its own, resolved to %v (asked: %v)", addrs, dns.asked())
	}
	if asked := dns.asked(); slices.Contains(asked, "x.example.com.corp.internal.") {
		t.Errorf("the proxy asked for the search-suffixed twin of an allowed name: %v", asked)
	}
	// A name with a record of its own resolves as before.
	if addrs, err := srv.Decide(ctx, "y.example.com", 443); err != nil || !slices.Equal(addrs, []netip.Addr{netip.MustParseAddr("198.51.100.7")}) {
		t.Errorf("y.example.com: %v, %v; want 198.51.100.7", addrs, err)
	}
	// A single label keeps the search list: it names a host of the search domains.
	if addrs, err := srv.Decide(ctx, "gitlab", 443); err != nil || !slices.Equal(addrs, []netip.Addr{netip.MustParseAddr("192.0.2.5")}) {
		t.Errorf("gitlab: %v, %v; want 192.0.2.5 (gitlab.corp.internal)", addrs, err)
	}
}

// privateResolvConf binds a resolv.conf with text over /etc/resolv.conf in this
// process's own mount namespace and brings its network namespace's loopback up.
func privateResolvConf(t *testing.T, text string) {
	t.Helper()
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(conf, "/etc/resolv.conf", "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		t.Fatal(err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		t.Fatal(err)
	}
}

// zoneServer answers A queries over UDP on 127.0.0.1:53 from a table of rooted
// names, NXDOMAIN for any other name, and keeps the names it was asked.
type zoneServer struct {
	mu    sync.Mutex
	names []string
}

func (z *zoneServer) asked() []string {
	z.mu.Lock()
	defer z.mu.Unlock()
	return slices.Clone(z.names)
}

func serveZone(t *testing.T, zone map[string]netip.Addr) *zoneServer {
	t.Helper()
	pc, err := net.ListenPacket("udp4", "127.0.0.1:53")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	z := &zoneServer{}
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil {
				continue
			}
			name, qtype, end, ok := question(buf[:n])
			if !ok {
				continue
			}
			z.mu.Lock()
			z.names = append(z.names, name)
			z.mu.Unlock()
			pc.WriteTo(answer(buf[:end], name, qtype, zone), from)
		}
	}()
	return z
}

// question parses a query's one question: the name (lower case, rooted), its type,
// and where the question ends.
func question(msg []byte) (string, uint16, int, bool) {
	if len(msg) < 12 || binary.BigEndian.Uint16(msg[4:]) != 1 {
		return "", 0, 0, false
	}
	var name strings.Builder
	i := 12
	for i < len(msg) && msg[i] != 0 {
		l := int(msg[i])
		if l > 63 || i+1+l > len(msg) {
			return "", 0, 0, false
		}
		name.WriteString(strings.ToLower(string(msg[i+1 : i+1+l])))
		name.WriteByte('.')
		i += 1 + l
	}
	if i+5 > len(msg) {
		return "", 0, 0, false
	}
	return name.String(), binary.BigEndian.Uint16(msg[i+1:]), i + 5, true
}

// answer builds the reply to the query head (header and question): the name's
// address for an A query, no answer for another type of a known name, NXDOMAIN for
// an unknown name.
func answer(head []byte, name string, qtype uint16, zone map[string]netip.Addr) []byte {
	reply := slices.Clone(head)
	addr, known := zone[name]
	flags := uint16(0x8580) // a response, authoritative, recursion desired and available
	if !known {
		flags |= 3 // NXDOMAIN
	}
	binary.BigEndian.PutUint16(reply[2:], flags)
	binary.BigEndian.PutUint16(reply[8:], 0)  // no authority records
	binary.BigEndian.PutUint16(reply[10:], 0) // no additional records (the query's EDNS option is not echoed)
	if !known || qtype != 1 {
		binary.BigEndian.PutUint16(reply[6:], 0)
		return reply
	}
	binary.BigEndian.PutUint16(reply[6:], 1)
	a := addr.As4()
	reply = append(reply, 0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4)
	return append(reply, a[:]...)
}
