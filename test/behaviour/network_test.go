package behaviour

import (
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// --allow-net (issue 17), against every backend, all on loopback: the servers are
// the test's own on the host's 127.0.0.1, and the proxy resolves names through a
// table the test hands it (_AGENTBOX_TEST_HOSTS), never through DNS.

// netServers are the host-side servers of the rows.
type netServers struct {
	listed, hidden, git string // ports: a file server listed by address, one not listed, git http-backend
	gitTLS, caFile      string // git http-backend over HTTPS (its certificate names example.com), and that certificate
	gitDaemon, socksCmd string // git daemon (git://), and a GIT_PROXY_COMMAND that goes through SOCKS5
}

func startNetServers(t *testing.T) netServers {
	t.Helper()
	serve := func(h http.Handler) string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: h}
		go srv.Serve(l)
		t.Cleanup(func() { srv.Close() })
		_, port, _ := net.SplitHostPort(l.Addr().String())
		return port
	}
	file := func(body string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "%s host=%s\n", body, r.Host) })
	}
	// A bare repository with one commit, served by git http-backend (smart HTTP:
	// the clone's POST to git-upload-pack goes through the proxy too).
	root := t.TempDir()
	work := filepath.Join(root, "work")
	gitRun := func(dir string, args ...string) {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+root,
			"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	gitRun(root, "init", "-q", "-b", "main", work)
	writeFile(t, filepath.Join(work, "served"), "through the proxy\n")
	gitRun(work, "add", "served")
	gitRun(work, "commit", "-q", "-m", "served")
	gitRun(root, "clone", "-q", "--bare", work, filepath.Join(root, "repo.git"))
	gitPath, err := exec.LookPath("git")
	if err != nil {
		t.Fatal(err)
	}
	backend := &cgi.Handler{Path: gitPath, Args: []string{"http-backend"}, Dir: root,
		Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_NOSYSTEM=1", "HOME=" + root}}
	// The same over HTTPS: httptest's certificate is for example.com (and 127.0.0.1),
	// so git inside verifies the name it asked the proxy for, through the tunnel.
	tls := httptest.NewTLSServer(backend)
	t.Cleanup(tls.Close)
	caDir := testenv.Dir(t, "ca")
	caFile := filepath.Join(caDir, "ca.pem")
	writeFile(t, caFile, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tls.Certificate().Raw})))
	_, tlsPort, _ := net.SplitHostPort(tls.Listener.Addr().String())
	srv := netServers{listed: serve(file("listed")), hidden: serve(file("hidden")), git: serve(backend), gitTLS: tlsPort, caFile: caFile}
	srv.gitDaemon, srv.socksCmd = startGitDaemon(t, root)
	return srv
}

// startGitDaemon serves root over git:// on loopback and writes a GIT_PROXY_COMMAND
// for inside the sandbox that asks the proxy, over SOCKS5, for the host and port git
// gives it (the way ssh's ProxyCommand takes Git over ssh through it).
func startGitDaemon(t *testing.T, root string) (port, proxyCmd string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ = net.SplitHostPort(l.Addr().String())
	l.Close()
	d := exec.Command("git", "daemon", "--reuseaddr", "--listen=127.0.0.1", "--port="+port, "--export-all", "--base-path="+root, root)
	d.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+root)
	// git daemon runs git-daemon, which forks a server per connection: its own
	// process group, ended whole.
	d.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(-d.Process.Pid, syscall.SIGKILL); d.Wait() })
	if !waitFor(func() bool {
		c, err := net.Dial("tcp", "127.0.0.1:"+port)
		if err == nil {
			c.Close()
		}
		return err == nil
	}) {
		t.Fatal("git daemon did not start")
	}
	dir := testenv.Dir(t, "socks")
	proxyCmd = filepath.Join(dir, "socks5")
	// OpenBSD netcat, as a user would take ssh through the proxy (README); -N
	// half-closes the socket when Git is done sending, so the server ends.
	writeFile(t, proxyCmd, "#!/bin/sh\nexec nc.openbsd -N -X 5 -x 127.0.0.1:3128 \"$1\" \"$2\"\n")
	if err := os.Chmod(proxyCmd, 0o755); err != nil {
		t.Fatal(err)
	}
	return port, proxyCmd
}

func TestAllowNet(t *testing.T) {
	srv := startNetServers(t)
	for _, backend := range backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := newBox(t, backend)
			allowNet(t, b, srv)
			// --dry-run shows the new namespace, the proxy's address and the
			// variables.
			r := run(b.fixture().Agentbox(b.repo, "exec", "--backend", backend, "--dry-run", "--allow-net", "@npm", "--", "true"))
			netns := map[string]string{"native": "unshare  user mount pid ipc uts cgroup net", "bwrap": "--unshare-net"}[backend]
			for _, want := range []string{netns, "127.0.0.1:3128", "HTTPS_PROXY=http://127.0.0.1:3128"} {
				if r.code != 0 || !strings.Contains(r.stdout, want) {
					t.Errorf("--dry-run --allow-net lacks %q:\n%s", want, r)
				}
			}
		})
	}
}

// allowNet runs one session that tries every row from inside, then checks the
// session record for the refusals.
func allowNet(t *testing.T, b *box, srv netServers) {
	args := []string{"--no-git-save",
		"--allow-net", "allowed.test", "--allow-net", "127.0.0.1:" + srv.listed, // reachable by name and address
		"--allow-net", "rebind.test", // listed, but it resolves to loopback at a port not listed
		"--allow-net", "git.test:" + srv.git, "--allow-net", "127.0.0.1:" + srv.git,
		"--allow-net", "example.com:" + srv.gitTLS, "--allow-net", "127.0.0.1:" + srv.gitTLS,
		"--allow-net", "git.test:" + srv.gitDaemon, "--allow-net", "127.0.0.1:" + srv.gitDaemon,
	}
	curl := "curl -sS --max-time 20"
	script := fmt.Sprintf(`
echo "init=$(tr '\0' ' ' </proc/1/cmdline)"
echo "env=$HTTP_PROXY $HTTPS_PROXY $ALL_PROXY $NO_PROXY $http_proxy $https_proxy $all_proxy $no_proxy"
echo "allowed=$(%[1]s http://allowed.test:%[2]s/a)"
echo "tunnel=$(%[1]s -p http://allowed.test:%[2]s/b)"
echo "socks=$(%[1]s -x socks5h://127.0.0.1:3128 http://allowed.test:%[2]s/c)"
echo "refused=$(%[1]s http://other.test:%[2]s/d)"
echo "refusedtunnel=$(%[1]s -v -p http://other.test:%[2]s/e 2>&1 | grep -a '^< HTTP/' | tr -d '\r')"
%[1]s --noproxy '*' http://127.0.0.1:%[2]s/f >/dev/null 2>&1; echo "direct=$?"
echo "rebind=$(%[1]s -v -p http://rebind.test:%[3]s/g 2>&1 | grep -a '^< HTTP/' | tr -d '\r')"
# NO_PROXY covers 127.0.0.1: --noproxy '' sends it through the proxy anyway.
echo "rawip=$(%[1]s --noproxy '' -v -p http://127.0.0.1:%[3]s/h 2>&1 | grep -a '^< HTTP/' | tr -d '\r')"
git clone -q http://git.test:%[4]s/repo.git /tmp/clone 2>&1 && echo "git=$(cat /tmp/clone/served)"
GIT_SSL_CAINFO=%[6]s git clone -q https://example.com:%[5]s/repo.git /tmp/clone-tls 2>&1 && echo "gittls=$(cat /tmp/clone-tls/served)"
GIT_PROXY_COMMAND=%[8]s git clone -q git://git.test:%[7]s/repo.git /tmp/clone-socks 2>&1 && echo "gitsocks=$(cat /tmp/clone-socks/served)"
`, curl, srv.listed, srv.hidden, srv.git, srv.gitTLS, srv.caFile, srv.gitDaemon, srv.socksCmd)
	cmd := b.command(b.repo, args, script)
	cmd.Env = append(cmd.Env, "_AGENTBOX_TEST_HOSTS=allowed.test=127.0.0.1,rebind.test=127.0.0.1,git.test=127.0.0.1,other.test=127.0.0.1,example.com=127.0.0.1")
	r := run(cmd)
	if r.code != 0 {
		t.Fatalf("session failed:\n%s", r)
	}
	got := map[string]string{}
	for _, l := range strings.Split(r.stdout, "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			got[k] = strings.TrimSpace(v)
		}
	}
	want := map[string]string{
		// The Go init ran (the raw init has no proxy step): its argv0.
		"init": "agentbox-init",
		"env": "http://127.0.0.1:3128 http://127.0.0.1:3128 socks5h://127.0.0.1:3128 localhost,127.0.0.1,::1 " +
			"http://127.0.0.1:3128 http://127.0.0.1:3128 socks5h://127.0.0.1:3128 localhost,127.0.0.1,::1",
		"allowed":       "listed host=allowed.test:" + srv.listed,
		"tunnel":        "listed host=allowed.test:" + srv.listed,
		"socks":         "listed host=allowed.test:" + srv.listed,
		"refused":       "agentbox: other.test is not in --allow-net",
		"refusedtunnel": "< HTTP/1.1 403 agentbox: other.test is not in --allow-net",
		"direct":        "7", // curl: could not connect: no route out but the proxy
		"rebind":        "< HTTP/1.1 403 agentbox: rebind.test resolves to 127.0.0.1, a loopback address not in --allow-net",
		"rawip":         "< HTTP/1.1 403 agentbox: 127.0.0.1:" + srv.hidden + " is not in --allow-net",
		"git":           "through the proxy",
		"gittls":        "through the proxy", // HTTPS: a CONNECT tunnel, TLS end to end
		"gitsocks":      "through the proxy", // git:// over SOCKS5, as Git over ssh would go
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: got %q, want %q", k, got[k], w)
		}
	}
	if t.Failed() {
		t.Logf("session output:\n%s", r)
	}

	// The record lists the refusals with host, port and count.
	log := run(b.fixture().Agentbox(b.repo, "log"))
	lines := strings.Split(strings.TrimSpace(log.stdout), "\n")
	if log.code != 0 || len(lines) < 2 {
		t.Fatalf("agentbox log:\n%s", log)
	}
	id := strings.Fields(lines[1])[0]
	show := run(b.fixture().Agentbox(b.repo, "show", "--json", id))
	var rec struct {
		Policy struct {
			AllowNet []string `json:"allow_net"`
		} `json:"policy"`
		NetRefusals []struct {
			Host   string `json:"host"`
			Port   int    `json:"port"`
			Reason string `json:"reason"`
			Count  int    `json:"count"`
		} `json:"net_refusals"`
	}
	if err := json.Unmarshal([]byte(show.stdout), &rec); err != nil {
		t.Fatalf("agentbox show --json: %v\n%s", err, show)
	}
	refused := map[string]int{}
	for _, n := range rec.NetRefusals {
		refused[fmt.Sprintf("%s:%d %s", n.Host, n.Port, n.Reason)] = n.Count
	}
	for k, n := range map[string]int{
		"other.test:" + srv.listed + " not listed":                      2,
		"rebind.test:" + srv.hidden + " resolves to loopback 127.0.0.1": 1,
		"127.0.0.1:" + srv.hidden + " address not listed":               1,
	} {
		if refused[k] != n {
			t.Errorf("record: refusal %q counted %d times, want %d (record: %v)", k, refused[k], n, rec.NetRefusals)
		}
	}
	if len(rec.Policy.AllowNet) != len(args)/2 {
		t.Errorf("record: allow_net %v", rec.Policy.AllowNet)
	}
	text := run(b.fixture().Agentbox(b.repo, "show", id))
	if !strings.Contains(text.stdout, "net refused  other.test port "+srv.listed+": not listed (2×)") {
		t.Errorf("agentbox show does not list the refusal:\n%s", text.stdout)
	}
}

// --allow-net with --offline is a contradiction: refused before anything runs.
func TestAllowNetOffline(t *testing.T) {
	b := newBox(t, "native")
	r := b.sh("true", "--offline", "--allow-net", "example.com")
	if r.code != 125 || !strings.Contains(r.stderr, "--allow-net: goes against --offline") {
		t.Errorf("--offline --allow-net:\n%s", r)
	}
	r = b.sh("true", "--allow-net", "@nonesuch")
	if r.code != 125 || !strings.Contains(r.stderr, "no such preset") {
		t.Errorf("--allow-net @nonesuch:\n%s", r)
	}
}

// The proxy's only endpoint is inside the sandbox: the socket listening on
// 127.0.0.1:3128 in the sandbox's network namespace is the launcher's (it serves it),
// no socket of the launcher listens in the host's namespace, and the command holds no
// descriptor of it.
func TestAllowNetNoHostListener(t *testing.T) {
	for _, backend := range backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := newBox(t, backend)
			ready, release := filepath.Join(b.repo, ".ready"), filepath.Join(b.repo, ".go")
			// ls without a pipe or redirection (see noLeakedFds); then the inode of
			// the listening socket as the sandbox's namespace sees it.
			cmd := b.command(b.repo, []string{"--no-git-save", "--allow-net", "example.test"}, `ls /proc/$$/fd; echo END-FDS
				awk '$2 == "0100007F:0C38" && $4 == "0A" { print "inode=" $10 }' /proc/net/tcp
				awk '$2 == "0100007F:0C38" && $4 == "0A" { print $10 }' /proc/net/tcp > "$REPO/.inode"
				touch "$REPO/.ready"
				i=0; while [ ! -e "$REPO/.go" ] && [ $i -lt 2400 ]; do sleep 0.05; i=$((i+1)); done`)
			res := make(chan result, 1)
			if err := startAndCollect(cmd, res); err != nil {
				t.Fatal(err)
			}
			if !waitFor(func() bool { return exists(ready) }) {
				os.WriteFile(release, nil, 0o644)
				t.Fatalf("the session never got ready:\n%s", <-res)
			}
			// The init hands the listener to the launcher in a frame the launcher
			// reads beside the command's start: wait until it holds it (or give up,
			// within the command's own wait for the release: a loaded machine can
			// be seconds late).
			inode, _ := os.ReadFile(filepath.Join(b.repo, ".inode"))
			launcher := launcherSockets(t, cmd.Process.Pid)
			for deadline := time.Now().Add(time.Minute); !launcher[strings.TrimSpace(string(inode))] && time.Now().Before(deadline); {
				time.Sleep(50 * time.Millisecond)
				launcher = launcherSockets(t, cmd.Process.Pid)
			}
			host := listeningInodes(t, "/proc/net/tcp", "/proc/net/tcp6")
			os.WriteFile(release, nil, 0o644)
			r := <-res
			if r.code != 0 {
				t.Fatalf("session failed:\n%s", r)
			}
			for ino := range launcher {
				if host[ino] {
					t.Errorf("the launcher listens in the host's network namespace (socket %s)", ino)
				}
			}
			fds, rest, _ := strings.Cut(r.stdout, "END-FDS")
			if got := strings.Join(strings.Fields(fds), " "); got != "0 1 2" {
				t.Errorf("command has fds %q, want 0 1 2", got)
			}
			ino := strings.TrimPrefix(strings.TrimSpace(rest), "inode=")
			if ino == "" || !launcher[ino] {
				t.Errorf("the socket listening on 127.0.0.1:3128 inside (inode %q) is not the launcher's (it holds %v)", ino, launcher)
			}
		})
	}
}

// launcherSockets are the inodes of the sockets process pid holds.
func launcherSockets(t *testing.T, pid int) map[string]bool {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, e := range ents {
		l, err := os.Readlink(filepath.Join(dir, e.Name()))
		if ino, ok := strings.CutPrefix(l, "socket:["); ok && err == nil {
			out[strings.TrimSuffix(ino, "]")] = true
		}
	}
	return out
}

// listeningInodes are the inodes of the TCP sockets in state LISTEN in the tables
// given (the test's own network namespace: the host's).
func listeningInodes(t *testing.T, tables ...string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, p := range tables {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // no IPv6
		}
		for _, l := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(l)
			if len(f) > 9 && f[3] == "0A" {
				out[f[9]] = true
			}
		}
	}
	return out
}
