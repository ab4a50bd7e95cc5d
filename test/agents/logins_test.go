package agents

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestKeepAgentLogins: with both agents' state kept, the real CLIs run on the
// operator's logins and leave them as they were, with no finding; then the real
// Codex, inside, signs in with another key (what a hostile command would make it
// do), and the audit puts the operator's ChatGPT login back byte for byte, which
// Codex on the host still reads as its login.
func TestKeepAgentLogins(t *testing.T) {
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := newBox(t, backend)
			codexAuth := filepath.Join(b.Home, ".codex", "auth.json")
			claudeCreds := filepath.Join(b.Home, ".claude", ".credentials.json")
			for _, d := range []string{".codex", ".claude"} {
				if err := os.MkdirAll(filepath.Join(b.Home, d), 0o700); err != nil {
					t.Fatal(err)
				}
			}
			logins := map[string]string{codexAuth: chatGPTLogin("acct-A", "user-A", 4102444800), claudeCreds: claudeAiLogin("acct-A")}
			for p, content := range logins {
				sandboxtest.WriteFile(t, p, content)
			}
			testenv.Chown(t, filepath.Join(b.Home, ".codex"))
			testenv.Chown(t, filepath.Join(b.Home, ".claude"))
			keep := []string{"--keep-agent", "claude", "--keep-agent", "codex"}

			r := b.run(`codex login status 2>&1; claude mcp list >/dev/null 2>&1; true`, keep...)
			if !strings.Contains(r.Stdout, "Logged in using ChatGPT") {
				t.Fatalf("codex does not read the login as this test writes it, so the rest proves nothing:\n%s", r)
			}
			for p, content := range logins {
				if strings.Contains(r.Stderr, p) || sandboxtest.ReadFile(t, p) != content {
					t.Errorf("the agents' own run changed or reported the login %s:\n%s", p, r.Stderr)
				}
			}

			r = b.run(`printf sk-other | codex login --with-api-key >/dev/null 2>&1; grep -c sk-other ~/.codex/auth.json`, keep...)
			if strings.TrimSpace(r.Stdout) != "1" {
				t.Fatalf("codex did not sign in with the other key inside:\n%s", r)
			}
			if want := "agentbox: audit: " + codexAuth + ": the login of another account, put back as it was"; !strings.Contains(r.Stderr, want) {
				t.Errorf("stderr lacks %q:\n%s", want, r.Stderr)
			}
			if got := sandboxtest.ReadFile(t, codexAuth); got != logins[codexAuth] {
				t.Errorf("auth.json after the audit:\n%s\nwant the operator's:\n%s", got, logins[codexAuth])
			}
			status := testenv.Command(t, b.Home, filepath.Join(agentsBin, "codex"), "login", "status")
			status.Env = append(status.Env, "CODEX_DISABLE_UPDATE_CHECK=1")
			if out, _ := status.CombinedOutput(); !strings.Contains(string(out), "Logged in using ChatGPT") {
				t.Errorf("codex on the host after the audit: %s", out)
			}
		})
	}
}

// chatGPTLogin is the auth.json Codex 0.171.0 writes after a ChatGPT sign-in, with
// unsigned tokens naming the account (Codex reads them offline as this test does)
// that expire at exp.
func chatGPTLogin(account, user string, exp int) string {
	claims := fmt.Sprintf(`{"iss":"https://auth.openai.com","sub":"auth0|%s","aud":["app_x"],"iat":1,"exp":%d,"email":"%s@example.invalid","https://api.openai.com/auth":{"chatgpt_account_id":"%s","chatgpt_user_id":"%s","chatgpt_plan_type":"plus"}}`,
		user, exp, user, account, user)
	tok := "eyJhbGciOiJSUzI1NiJ9." + base64.RawURLEncoding.EncodeToString([]byte(claims)) + ".c2ln"
	return fmt.Sprintf("{\n  \"auth_mode\": \"chatgpt\",\n  \"OPENAI_API_KEY\": null,\n  \"tokens\": {\n    \"id_token\": %q,\n    \"access_token\": %q,\n    \"refresh_token\": \"rt-%s\",\n    \"account_id\": %q\n  },\n  \"last_refresh\": \"2026-12-06T00:00:00Z\"\n}",
		tok, tok, user, account)
}

// claudeAiLogin is Claude Code 2.1.332's stored login, not expired.
func claudeAiLogin(account string) string {
	return fmt.Sprintf(`{"claudeAiOauth":{"accessToken":"sk-ant-oat01-%s","refreshToken":"sk-ant-ort01-%s","expiresAt":4102444800000,"scopes":["user:inference","user:profile"],"subscriptionType":"pro","rateLimitTier":null,"clientId":"c","accountUuid":%q,"organizationUuid":"org-%s"}}`,
		account, account, account, account)
}

// tokenServer answers every POST as OpenAI's token endpoint answers a refresh,
// with new unsigned tokens naming the account and user given as arguments; it
// writes the port it listens on to the file named by its first argument.
const tokenServer = `import base64, json, sys, time
from http.server import BaseHTTPRequestHandler, HTTPServer
def jwt(c): return "eyJhbGciOiJSUzI1NiJ9." + base64.urlsafe_b64encode(json.dumps(c).encode()).decode().rstrip("=") + ".c2ln"
class H(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        now = int(time.time())
        c = {"iss": "https://auth.openai.com", "sub": "auth0|" + sys.argv[3], "aud": ["app_x"], "iat": now, "exp": now + 864000,
             "https://api.openai.com/auth": {"chatgpt_account_id": sys.argv[2], "chatgpt_user_id": sys.argv[3]}}
        out = json.dumps({"id_token": jwt(c), "access_token": jwt(c), "refresh_token": "rt-%d" % now, "expires_in": 864000}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
    def log_message(self, *a): pass
s = HTTPServer(("127.0.0.1", 0), H)
open(sys.argv[1], "w").write(str(s.server_port))
s.serve_forever()
`

// TestKeepAgentLoginRefresh: the real Codex refreshes its login inside a kept
// session (its token endpoint moved to a server in the sandbox that answers as
// OpenAI's does): a refresh to the same account stays on the host with no finding,
// one that returns another account's tokens is put back.
func TestKeepAgentLoginRefresh(t *testing.T) {
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := newBox(t, backend)
			auth := filepath.Join(b.Home, ".codex", "auth.json")
			if err := os.MkdirAll(filepath.Dir(auth), 0o700); err != nil {
				t.Fatal(err)
			}
			// Expired: Codex refreshes before its first request.
			stale := chatGPTLogin("acct-A", "user-A", 2)
			sandboxtest.WriteFile(t, auth, stale)
			sandboxtest.WriteFile(t, filepath.Join(b.Repo, "token.py"), tokenServer)
			testenv.Chown(t, filepath.Join(b.Home, ".codex"))
			testenv.Chown(t, b.Repo)
			// The server answers, codex refreshes before its first request (which
			// fails: the session is offline), and is stopped once the login changed.
			refresh := func(account, user string) sandboxtest.Result {
				return b.run(`/usr/bin/python3 token.py /tmp/port `+account+` `+user+` & pid=$!
for i in $(seq 50); do test -s /tmp/port && break; sleep 0.2; done
CODEX_REFRESH_TOKEN_URL_OVERRIDE=http://127.0.0.1:$(cat /tmp/port)/oauth/token timeout 60 codex exec --skip-git-repo-check hi </dev/null >/dev/null 2>&1 & cpid=$!
for i in $(seq 300); do grep -q '"refresh_token": "rt-[0-9]' ~/.codex/auth.json && break; sleep 0.2; done
sleep 1; kill $cpid $pid; grep -o '"refresh_token": "rt-[0-9]*"' ~/.codex/auth.json`, "--keep-agent", "codex", "--offline")
			}

			r := refresh("acct-A", "user-A")
			if !strings.Contains(r.Stdout, `"refresh_token": "rt-`) {
				t.Fatalf("codex did not refresh its login inside:\n%s", r)
			}
			refreshed := sandboxtest.ReadFile(t, auth)
			if strings.Contains(r.Stderr, auth) || !strings.Contains(refreshed, strings.TrimSpace(r.Stdout)) {
				t.Errorf("the same account's refresh did not reach the host as it is:\n%s\nauth.json: %s", r, refreshed)
			}

			sandboxtest.WriteFile(t, auth, stale)
			r = refresh("acct-B", "user-B")
			if !strings.Contains(r.Stdout, `"refresh_token": "rt-`) {
				t.Fatalf("codex did not refresh its login inside:\n%s", r)
			}
			if want := "agentbox: audit: " + auth + ": the login of another account, put back as it was"; !strings.Contains(r.Stderr, want) {
				t.Errorf("stderr lacks %q:\n%s", want, r)
			}
			if got := sandboxtest.ReadFile(t, auth); got != stale {
				t.Errorf("auth.json after the audit:\n%s\nwant the operator's:\n%s", got, stale)
			}
		})
	}
}
