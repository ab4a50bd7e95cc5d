package adversarial

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/sandboxtest"
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
