package kernel

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseSocketTable(t *testing.T) {
	table := `Num       RefCount Protocol Flags    Type St Inode Path
0000000000000000: 00000002 00000000 00010000 0001 01 101 /var/lib/db/db.sock
0000000000000000: 00000002 00000000 00010000 0001 01 102 @/tmp/.X11-unix/X0
0000000000000000: 00000002 00000000 00000000 0002 01 103
0000000000000000: 00000002 00000000 00010000 0001 01 104 /srv/a b.sock
0000000000000000: 00000002 00000000 00010000 0001 01 105 /srv/line
x y z w v u nonumber rest
`
	got, err := parseSocketTable(strings.NewReader(table), maxTableBytes)
	if err != nil {
		t.Fatal(err)
	}
	want := []sockEntry{{101, "/var/lib/db/db.sock"}, {102, "@/tmp/.X11-unix/X0"}, {104, "/srv/a b.sock"}, {105, "/srv/line"}}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	line := "0000000000000000: 00000002 00000000 00010000 0001 01 1 /x\n"
	long := io.LimitReader(endless(line), 100*int64(len(line)))
	if _, err := parseSocketTable(long, 99*int64(len(line))); err == nil {
		t.Error("a table past the bound was read without an error")
	}
}

// endless repeats s forever.
type endless string

func (e endless) Read(b []byte) (int, error) {
	n := 0
	for n < len(b) {
		n += copy(b[n:], e)
	}
	return n, nil
}

// listen binds a path socket for the test's life.
func listen(t *testing.T, path string) {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
}

// TestHostSocketsNeverCut: past the bound the list is refused, naming the busiest
// directory; a kept path's socket, a repository's below HOME and a writable
// repository's elsewhere are masked (a host daemon's, each) though HOME's are not.
func TestHostSocketsNeverCut(t *testing.T) {
	// Below /var/tmp: /tmp is private inside, and its sockets need no mask.
	root, err := os.MkdirTemp("/var/tmp", "agentbox-hostsockets-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	home, repo, crowd := filepath.Join(root, "home"), filepath.Join(root, "repo"), filepath.Join(root, "crowd")
	kept := filepath.Join(home, ".agent")
	homeRepo := filepath.Join(home, "src", "repo")
	for _, d := range []string{home, repo, crowd, kept, homeRepo} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	p := SocketScope{Home: home, Bound: []string{kept, homeRepo}}
	var ents []sockEntry
	add := func(path string) {
		listen(t, path)
		ents = append(ents, sockEntry{Inode: uint64(len(ents) + 1), Path: path})
	}
	for _, s := range []string{filepath.Join(home, "h.sock"), filepath.Join(kept, "k.sock"), filepath.Join(repo, "r.sock"), filepath.Join(homeRepo, "hr.sock")} {
		add(s)
	}
	got, err := hostSockets(p, ents, t.TempDir())
	want := []string{filepath.Join(kept, "k.sock"), filepath.Join(repo, "r.sock"), filepath.Join(homeRepo, "hr.sock")}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("got %v, %v; want %v: all but HOME's", got, err, want)
	}
	for i := range maxMaskedSockets {
		add(filepath.Join(crowd, fmt.Sprintf("%d.sock", i)))
	}
	got, err = hostSockets(p, ents, t.TempDir())
	var tm *TooManySocketsError
	if !errors.As(err, &tm) || got != nil || tm.Dir != crowd || tm.Count != maxMaskedSockets+len(want) {
		t.Fatalf("over the bound: got %v, %v; want a refusal naming %s", got, err, crowd)
	}
	if msg := err.Error(); strings.Contains(msg, "\n") || !strings.Contains(msg, "refused") {
		t.Errorf("refusal is not one line naming why: %q", msg)
	}
}

// TestSocketTablesOwn: the launcher's own namespace is always read, and counted once.
func TestSocketTablesOwn(t *testing.T) {
	path := filepath.Join(t.TempDir(), "own.sock")
	listen(t, path)
	ents, err := socketTables("/proc")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if e.Path == path {
			n++
		}
	}
	if n != 1 {
		t.Errorf("own socket listed %d times, want once", n)
	}
	if _, err := socketTables(t.TempDir()); err == nil {
		t.Error("no error without the launcher's own table")
	}
}

// BenchmarkSocketTables: what listing every visible namespace's sockets costs a launch.
func BenchmarkSocketTables(b *testing.B) {
	for b.Loop() {
		if _, err := socketTables("/proc"); err != nil {
			b.Fatal(err)
		}
	}
}

// TestHostSocketsNestedSandbox: with --nested-sandbox a session never gets
// Landlock's resolve-unix rule (its domain would refuse the command's mounts), so
// the host's sockets are listed for masking on every kernel; without it they are
// listed only where the kernel cannot deny them (before Linux 7.1). One decision
// for both: a session gets the rule or the masks, never neither.
func TestHostSocketsNestedSandbox(t *testing.T) {
	dir, err := os.MkdirTemp("/var/tmp", "agentbox-nested-") // /tmp is private inside: no mask there
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	dir, _ = filepath.EvalSymlinks(dir)
	sock := filepath.Join(dir, "daemon.sock")
	listen(t, sock)
	for _, nested := range []bool{false, true} {
		p := SocketScope{Bound: []string{"/nonexistent-repo"}, NestedSandbox: nested}
		deny := DenyPathSockets(nested)
		if want := CanDenyPathSockets() && !nested; deny != want {
			t.Errorf("nested %v: DenyPathSockets %v, want %v (Landlock ABI %d)", nested, deny, want, LandlockABI())
		}
		masks, err := HostSockets(p)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(masks, sock) == deny {
			t.Errorf("nested %v, deny %v: %s masked %v: a session must get the rule or the mask, not both, not neither",
				nested, deny, sock, slices.Contains(masks, sock))
		}
	}
}
