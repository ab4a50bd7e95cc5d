package adversarial

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/kernel"
	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// The host daemons' path sockets that enumeration (kernel.HostSockets) must all
// find: one in a network namespace of its own, more than a plan masks, and the
// real ones among hundreds that another session binds. Each row runs on every
// backend with the host checked afterwards: the one-socket row in TestEscapes, the
// crowded rows in TestHostSocketCrowds, which scripts/test.sh runs on its own —
// while they hold hundreds of sockets, every other launch on the machine that masks
// sockets one by one is refused, as it must be (kernel.TooManySocketsError), and a
// test of another package running at the same time would fail for it.

// daemons is how many daemon sockets a crowded row listens on: a list cut short
// anywhere leaves some of them out.
const daemons = 12

var socketAttacks = []attack{
	// A daemon with a network namespace of its own (systemd's PrivateNetwork=, a
	// container sharing a host directory) binds in the same file system; its
	// socket is not in the launcher's /proc/net/unix.
	{name: "host daemon socket bound in another network namespace", setup: netnsDaemonSocket, script: `
		try netns-daemon-socket sh -c 'socat -u UNIX-CONNECT:"$NSSOCK" - | grep -q agentbox-host'
		echo DONE`},
	// A daemon's socket in the repository (a project's own database, as devenv's
	// below .devenv/state: a PostgreSQL one runs any program as the user for a
	// COPY … TO PROGRAM). The repository is the host's directory, bound over HOME's
	// overlay, writable or not; the socket is the daemon's, not the session's.
	{name: "host daemon socket in a read-only repository below HOME", setup: repoDaemonSocket, args: []string{"--read-only"}, script: `
		try repo-daemon-socket sh -c 'socat -u UNIX-CONNECT:"$RSOCK" - | grep -q agentbox-host'
		echo DONE`},
	{name: "host daemon socket in the writable repository", setup: repoDaemonSocket, script: `
		try repo-daemon-socket sh -c 'socat -u UNIX-CONNECT:"$RSOCK" - | grep -q agentbox-host'
		echo DONE`},
	// The same in a further writable directory outside HOME.
	{name: "host daemon socket in an --add-dir directory", setup: addDirDaemonSocket, script: `
		try add-dir-daemon-socket sh -c 'socat -u UNIX-CONNECT:"$ASOCK" - | grep -q agentbox-host'
		echo DONE`},
	// The agent socket ssh's config names with IdentityAgent (1Password's below
	// HOME, another's outside it) is a key the session could sign with, and
	// --hide-secrets cannot hide a socket: the one in HOME's lower layer refuses
	// connections, the one outside is masked (or denied by Landlock) like every
	// host daemon's.
	{name: "ssh IdentityAgent sockets the ssh config names", setup: identityAgentSockets, args: []string{"--hide-secrets"}, script: `
		try identity-agent-in-home sh -c 'socat -u UNIX-CONNECT:"$HSOCK" - | grep -q agentbox-host'
		try identity-agent-outside-home sh -c 'socat -u UNIX-CONNECT:"$OSOCK" - | grep -q agentbox-host'
		echo DONE`},
}

var socketCrowdAttacks = []attack{
	// More sockets than a plan masks: none may be left out silently; the launch
	// is refused instead — where Landlock denies them all (Linux 7.1+), nothing is
	// masked and the session runs.
	{name: "more host sockets than a plan masks", setup: crowdedDaemonSockets, script: `
		for s in $DSOCKS; do try crowded-daemon-socket sh -c "socat -u UNIX-CONNECT:$s - | grep -q agentbox-host"; done
		echo DONE`, refused: refusedWithoutLandlock("host sockets:")},
	// Another session's sandbox binds hundreds of sockets in its own repository;
	// they must not push the host daemons' out of the masks, nor stop this launch.
	{name: "another session's sockets beside host daemons", setup: otherSessionSockets, script: `
		for s in $DSOCKS; do try daemon-beside-session-sockets sh -c "socat -u UNIX-CONNECT:$s - | grep -q agentbox-host"; done
		echo DONE`},
}

func init() { attacks = append(attacks, socketAttacks...) }

// TestHostSocketCrowds runs the crowded rows (see above for why on their own).
func TestHostSocketCrowds(t *testing.T) { runAttacks(t, socketCrowdAttacks) }

// refusedWithoutLandlock is why a launch is refused where host sockets are masked
// one by one; "" (it runs) where Landlock denies them all (kernel.CanDenyPathSockets).
func refusedWithoutLandlock(why string) string {
	if kernel.CanDenyPathSockets() {
		return ""
	}
	return why
}

// netnsDaemonSocket listens, as root in a new network namespace (unshare -n), on
// a socket below the outside directory, mode 0777, answering "agentbox-host".
func netnsDaemonSocket(t *testing.T, x *target) []string {
	if os.Geteuid() != 0 {
		t.Skip("a daemon in its own network namespace: unshare -n needs root")
	}
	sock := filepath.Join(x.Outside, "netns-daemon.sock")
	daemon := exec.Command("unshare", "-n", "socat", "UNIX-LISTEN:"+sock+",fork,mode=0777", "SYSTEM:echo agentbox-host")
	daemon.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-daemon.Process.Pid, syscall.SIGKILL)
		_ = daemon.Wait()
		os.Remove(sock)
	})
	// socat binds, then chmods the socket to mode=: waited for both, or the host's
	// snapshot taken next can see the socket before its chmod and call that a change.
	waitFor(t, "the namespaced daemon's socket", func() bool {
		fi, err := os.Lstat(sock)
		return err == nil && fi.Mode()&os.ModeSocket != 0 && fi.Mode().Perm() == 0o777
	})
	x.env = append(x.env, "NSSOCK="+sock)
	return nil
}

// repoDaemonSocket listens on a socket in the repository answering "agentbox-host".
func repoDaemonSocket(t *testing.T, x *target) []string {
	dir := filepath.Join(x.Repo, ".devenv", "state")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, ".s.PGSQL.5432")
	testenv.ServeUnix(t, sock, "agentbox-host")
	x.env = append(x.env, "RSOCK="+sock)
	return nil
}

// addDirDaemonSocket listens on a socket answering "agentbox-host" in a directory
// outside HOME that the session gets writable (--add-dir).
func addDirDaemonSocket(t *testing.T, x *target) []string {
	dir := filepath.Join(x.Outside, "added")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	testenv.Chown(t, dir)
	sock := filepath.Join(dir, "db.sock")
	testenv.ServeUnix(t, sock, "agentbox-host")
	x.env = append(x.env, "ASOCK="+sock)
	x.args = append(x.args, "--add-dir", dir)
	return nil
}

// crowdedDaemonSockets listens on daemons answering sockets among 600 silent ones,
// all connectable by everyone, below the outside directory.
func crowdedDaemonSockets(t *testing.T, x *target) []string {
	crowd := filepath.Join(x.Outside, "crowd")
	if err := os.Mkdir(crowd, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 600 {
		listenSilent(t, filepath.Join(crowd, fmt.Sprintf("s%d.sock", i)))
	}
	x.env = append(x.env, "DSOCKS="+daemonSockets(t, x))
	return nil
}

// otherSessionSockets starts a second session (the same backend, the same user)
// whose command binds 2000 sockets in its own repository and waits, and listens on
// daemons answering sockets below the outside directory.
func otherSessionSockets(t *testing.T, x *target) []string {
	other := newTarget(t, x.Backend)
	ready := filepath.Join(other.Repo, "ready")
	script := `ulimit -n 4096 && exec perl -MIO::Socket::UNIX -e '
		for my $i (1..2000) { push @s, IO::Socket::UNIX->new(Local => "$ENV{REPO}/s$i.sock", Listen => 1) or die "bind $i: $!" }
		open(my $f, ">", "$ENV{REPO}/ready") or die "ready: $!"; close $f; sleep 300'`
	cmd := other.Command(other.Repo, []string{"--no-git-save", "--no-record"}, script)
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true // keeps testenv's credentials: the test user's session
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ended := make(chan struct{})
	go func() { _ = cmd.Wait(); close(ended) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		<-ended
	})
	waitFor(t, "the other session's sockets", func() bool {
		select {
		case <-ended:
			t.Fatalf("the other session ended early:\n%s", out.String())
		default:
		}
		_, err := os.Lstat(ready)
		return err == nil
	})
	x.env = append(x.env, "DSOCKS="+daemonSockets(t, x))
	return nil
}

// daemonSockets listens on daemons answering sockets below the outside directory
// and returns their paths, space-separated.
func daemonSockets(t *testing.T, x *target) string {
	dir := filepath.Join(x.Outside, "daemons")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var socks []string
	for i := range daemons {
		s := filepath.Join(dir, fmt.Sprintf("d%d.sock", i))
		testenv.ServeUnix(t, s, "agentbox-host")
		socks = append(socks, s)
	}
	return strings.Join(socks, " ")
}

// listenSilent binds a listening socket at path, mode 0777, that answers nothing.
func listenSilent(t *testing.T, path string) {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatalf("listen %s: %v", path, err)
	}
	if err := os.Chmod(path, 0o777); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
}

// waitFor polls cond for up to a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// identityAgentSockets listens on two agent sockets answering "agentbox-host" that
// ~/.ssh/config names with IdentityAgent: one below HOME, one outside it.
func identityAgentSockets(t *testing.T, x *target) []string {
	inHome := filepath.Join(x.Home, ".1password")
	outside := filepath.Join(x.Outside, "agent")
	sshDir := filepath.Join(x.Home, ".ssh")
	for _, d := range []string{inHome, outside, sshDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		testenv.Chown(t, d)
	}
	hsock, osock := filepath.Join(inHome, "agent.sock"), filepath.Join(outside, "agent.sock")
	testenv.ServeUnix(t, hsock, "agentbox-host")
	testenv.ServeUnix(t, osock, "agentbox-host")
	cfg := filepath.Join(sshDir, "config")
	sandboxtest.WriteFile(t, cfg, "Host *\n  IdentityAgent ~/.1password/agent.sock\nHost work\n  IdentityAgent "+osock+"\n")
	testenv.Chown(t, cfg)
	x.env = append(x.env, "HSOCK="+hsock, "OSOCK="+osock)
	return nil
}
