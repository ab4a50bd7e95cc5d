package adversarial

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// A hostile command against its own --allow-net proxy: it fills every connection
// slot, sends names made of terminal escapes, garbage, a SOCKS greeting with no
// method the proxy takes and an oversized head. The launcher must survive it all
// and serve the next request, and nothing the command sent may reach the operator's
// terminal through agentbox's own output (its stderr, `agentbox show`).
func TestProxyAbuse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "still served") })}
	go srv.Serve(l)
	defer srv.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())

	script := fmt.Sprintf(`
fds=
for i in $(seq 300); do exec {fd}<>/dev/tcp/127.0.0.1/3128 || echo "FAILED open $i"; fds="$fds $fd"; done
for fd in $fds; do exec {fd}>&-; done
hostile() { exec 3<>/dev/tcp/127.0.0.1/3128; printf "$1" >&3; head -c 400 <&3 >/dev/null; exec 3>&-; }
hostile 'CONNECT \033]0;pwned\007:80 HTTP/1.1\r\n\r\n'
hostile 'GET http://\033[2J.test/ HTTP/1.1\r\n\r\n'
hostile 'GARBAGE\r\n\r\n'
hostile '\005\001\377'
exec 3<>/dev/tcp/127.0.0.1/3128; head -c 70000 /dev/zero | tr '\0' a >&3; head -c 100 <&3 | head -1; exec 3>&-
curl -sS --max-time 20 http://allowed.test:%s/ 2>&1; echo
`, port)
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			cmd := b.Command(b.Repo, []string{"--no-git-save", "--allow-net", "allowed.test", "--allow-net", "127.0.0.1:" + port}, "exec 2>/dev/null; /bin/bash -c '"+strings.ReplaceAll(script, "'", `'\''`)+"'")
			cmd.Env = append(cmd.Env, "_AGENTBOX_TEST_HOSTS=allowed.test=127.0.0.1")
			r := sandboxtest.Run(cmd)
			if r.Code != 0 || strings.Contains(r.Stdout, "FAILED") || !strings.Contains(r.Stdout, "431 Request Header Fields Too Large") || !strings.HasSuffix(strings.TrimSpace(r.Stdout), "still served") {
				t.Fatalf("the proxy did not survive its command:\n%s", r)
			}
			if strings.ContainsAny(r.Stderr, "\x1b\x07") {
				t.Errorf("escape bytes from the sandbox on agentbox's stderr: %q", r.Stderr)
			}
			log := sandboxtest.Run(b.Agentbox(b.Repo, "log"))
			lines := strings.Split(strings.TrimSpace(log.Stdout), "\n")
			if len(lines) < 2 {
				t.Fatalf("agentbox log:\n%s", log)
			}
			show := sandboxtest.Run(b.Agentbox(b.Repo, "show", strings.Fields(lines[1])[0]))
			if strings.ContainsAny(show.Stdout, "\x1b\x07") {
				t.Errorf("escape bytes from the sandbox in agentbox show:\n%q", show.Stdout)
			}
			if !strings.Contains(show.Stdout, `"\x1b]0;pwned\a" port 80: bad host name or port (1×)`) {
				t.Errorf("agentbox show does not list the hostile name, quoted:\n%s", show.Stdout)
			}
		})
	}
}

// An allowed name that resolves to one of the host's own interface addresses (DNS
// rebinding onto the host, not onto loopback) reaches every service the host runs
// on 0.0.0.0 as loopback would: the proxy must refuse it, as it refuses loopback,
// and refuse that address written as a literal under a prefix rule.
func TestProxyHostOwnAddress(t *testing.T) {
	own := hostOwnAddress(t)
	l, err := net.Listen("tcp", net.JoinHostPort(own, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "HOST SERVICE REACHED") })}
	go srv.Serve(l)
	defer srv.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	wide := "0.0.0.0/0"
	if strings.Contains(own, ":") {
		wide = "::/0"
	}
	script := fmt.Sprintf(`curl -sS --max-time 20 http://rebind.test:%[1]s/ 2>&1; echo
curl -sS --max-time 20 http://%[2]s/ 2>&1; echo
echo DONE`, port, net.JoinHostPort(own, port))
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			cmd := b.Command(b.Repo, []string{"--no-git-save", "--allow-net", "rebind.test", "--allow-net", wide}, script)
			cmd.Env = append(cmd.Env, "_AGENTBOX_TEST_HOSTS=rebind.test="+own)
			r := sandboxtest.Run(cmd)
			if r.Code != 0 || !strings.Contains(r.Stdout, "DONE") {
				t.Fatalf("session:\n%s", r)
			}
			if strings.Contains(r.Stdout, "HOST SERVICE REACHED") {
				t.Errorf("the host's own address %s reached through the proxy:\n%s", own, r.Stdout)
			}
			if !strings.Contains(r.Stdout, "one of this host's own addresses, not in --allow-net") {
				t.Errorf("no refusal naming the host's own address:\n%s", r.Stdout)
			}
		})
	}
}

// hostOwnAddress is an address of one of this host's interfaces that is not
// loopback or link-local.
func hostOwnAddress(t *testing.T) string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.IsGlobalUnicast() || ok && n.IP.IsPrivate() {
			return n.IP.String()
		}
	}
	testenv.Skip(t, "no interface address other than loopback and link-local")
	return ""
}
