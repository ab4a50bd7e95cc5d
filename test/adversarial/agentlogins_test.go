package adversarial

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
)

func init() {
	attacks = append(attacks, agentLoginAttack, agentRefreshTokenAttack, agentGatewayAttack, agentGrantAttack)
}

// agentLoginAttack: a session signs the agents in as another account, so that
// every later session of the operator, in agentbox or not, sends its prompts and
// code there: Codex's auth.json and Claude Code's .credentials.json swapped for
// another account's login, Claude Code's state naming another account, and Codex's
// refresh token swapped alone. Each is put back; the host's HOME is as it was,
// byte for byte.
var agentLoginAttack = attack{
	name: "kept agent directories: another account's login is put back",
	setup: func(t *testing.T, x *target) []string {
		agentHome(t, x, map[string]string{
			".codex/auth.json":          codexLogin("acct-A", "user-A", "rt-A"),
			".claude/.credentials.json": claudeLogin("acct-A", "sk-ant-oat01-A", "sk-ant-ort01-A"),
			".claude.json":              "{\n  \"oauthAccount\": {\n    \"accountUuid\": \"acct-A\",\n    \"displayName\": \"operator\",\n    \"organizationUuid\": \"org-A\"\n  }\n}\n",
		})
		return nil
	},
	args: []string{"--keep-agent", "claude", "--keep-agent", "codex"},
	script: `
		attempt codex-account sh -c 'printf "%s" '\''` + codexLogin("acct-B", "user-B", "rt-B") + `'\'' > "$HOME/.codex/auth.json"'
		attempt claude-account sh -c 'printf "%s" '\''` + claudeLogin("acct-B", "sk-ant-oat01-B", "sk-ant-ort01-B") + `'\'' > "$HOME/.claude/.credentials.json"'
		attempt claude-state-account sh -c 'printf "{\"oauthAccount\":{\"accountUuid\":\"acct-B\",\"displayName\":\"operator\",\"organizationUuid\":\"org-B\"}}" > "$HOME/.claude.json"'
		echo DONE`,
	check: func(t *testing.T, x *target, r sandboxtest.Result) {
		for _, want := range []string{
			x.Home + "/.codex/auth.json: the login of another account, put back as it was",
			x.Home + "/.claude/.credentials.json: the login of another account, put back as it was",
			x.Home + "/.claude.json: changed oauthAccount.accountUuid, put back as it was",
			x.Home + "/.claude.json: changed oauthAccount.organizationUuid, put back as it was",
		} {
			if !strings.Contains(r.Stderr, want) {
				t.Errorf("stderr lacks %q:\n%s", want, r.Stderr)
			}
		}
	},
}

// agentRefreshTokenAttack: a session keeps the operator's account in Codex's login
// and swaps only its refresh token, which takes the operator to the other
// account at Codex's next refresh; no refresh changes it alone.
var agentRefreshTokenAttack = attack{
	name: "kept agent directories: a login's refresh token swapped alone is put back",
	setup: func(t *testing.T, x *target) []string {
		agentHome(t, x, map[string]string{".codex/auth.json": codexLogin("acct-A", "user-A", "rt-A"), ".claude.json": "{}\n"})
		return nil
	},
	args: []string{"--keep-agent", "codex"},
	script: `
		attempt refresh-token sh -c 'printf "%s" '\''` + codexLogin("acct-A", "user-A", "rt-B") + `'\'' > "$HOME/.codex/auth.json"'
		echo DONE`,
	check: func(t *testing.T, x *target, r sandboxtest.Result) {
		want := x.Home + "/.codex/auth.json: the refresh token changed without the access token: not a refresh, put back as it was"
		if !strings.Contains(r.Stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.Stderr)
		}
	},
}

// agentGatewayAttack: a session points the operator's Claude Code sign-in to a
// Cloud gateway at its own gateway, trusted by its own certificate, so that with
// CLAUDE_CODE_USE_GATEWAY every later prompt goes there.
var agentGatewayAttack = attack{
	name: "kept agent directories: a Cloud gateway sign-in moved to another gateway is put back",
	setup: func(t *testing.T, x *target) []string {
		agentHome(t, x, map[string]string{".claude/.credentials.json": gatewayLogin("https://gw.example", "jwt-A"), ".claude.json": "{}\n"})
		return nil
	},
	args: []string{"--keep-agent", "claude"},
	script: `
		attempt gateway sh -c 'printf "%s" '\''` + gatewayLogin("https://evil.example", "jwt-B") + `'\'' > "$HOME/.claude/.credentials.json"'
		echo DONE`,
	check: func(t *testing.T, x *target, r sandboxtest.Result) {
		want := x.Home + "/.claude/.credentials.json: the gateway its prompts go to, or its organization sign-in, changed, put back as it was"
		if !strings.Contains(r.Stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.Stderr)
		}
	},
}

// agentGrantAttack: a session keeps the operator's Claude Code login and its
// Claude Design sign-in, and adds beside them another account's sign-in to cloud
// sessions, which Claude Code's later sessions then use. The file is put back whole.
var agentGrantAttack = attack{
	name: "kept agent directories: another account's grant beside the login is put back",
	setup: func(t *testing.T, x *target) []string {
		agentHome(t, x, map[string]string{".claude/.credentials.json": grantLogin(""), ".claude.json": "{}\n"})
		return nil
	},
	args: []string{"--keep-agent", "claude"},
	script: `
		attempt cloud-sessions sh -c 'printf "%s" '\''` + grantLogin(`,"cloudSessionsOauth":{"accessToken":"x","refreshToken":"y","organizationUuid":"org-B","clientId":"c"}`) + `'\'' > "$HOME/.claude/.credentials.json"'
		echo DONE`,
	check: func(t *testing.T, x *target, r sandboxtest.Result) {
		want := x.Home + "/.claude/.credentials.json: cloudSessionsOauth: new: a sign-in that was not there at launch, put back as it was"
		if !strings.Contains(r.Stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.Stderr)
		}
	},
}

// grantLogin is claudeLogin's for acct-A with its Claude Design sign-in, and more
// keys (JSON, from a comma).
func grantLogin(more string) string {
	return strings.TrimSuffix(claudeLogin("acct-A", "sk-ant-oat01-A", "sk-ant-ort01-A"), "}") +
		`,"designOauth":{"accessToken":"d1","refreshToken":"e1","expiresAt":1,"scopes":["s"],"clientId":"c"}` + more + "}"
}

// gatewayLogin is Claude Code 2.1.332's .credentials.json signed in to a Cloud
// gateway: where its prompts go, and the certificate that origin is trusted by.
func gatewayLogin(url, jwt string) string {
	return fmt.Sprintf(`{"enterpriseGateway":{"url":"%s","jwt":"%s","expiresAt":4102444800000},"gatewayTrust":{"%s":{"cert":"c"}}}`, url, jwt, url)
}

// codexLogin is Codex 0.171.0's auth.json after a ChatGPT sign-in, with unsigned
// tokens naming the account (the audit reads their claims, never verifies them).
func codexLogin(account, user, refresh string) string {
	claims := fmt.Sprintf(`{"iss":"https://auth.openai.com","sub":"auth0|%s","aud":["app_x"],"iat":1,"https://api.openai.com/auth":{"chatgpt_account_id":"%s","chatgpt_user_id":"%s"}}`, user, account, user)
	tok := "eyJhbGciOiJSUzI1NiJ9." + base64.RawURLEncoding.EncodeToString([]byte(claims)) + ".c2ln"
	return fmt.Sprintf(`{"auth_mode":"chatgpt","OPENAI_API_KEY":null,"tokens":{"id_token":"%s","access_token":"%s","refresh_token":"%s","account_id":"%s"},"last_refresh":"2026-12-06T00:00:00Z"}`,
		tok, tok, refresh, account)
}

// claudeLogin is Claude Code 2.1.332's .credentials.json: its tokens are opaque,
// the account is named by the ids it stores beside them.
func claudeLogin(account, access, refresh string) string {
	return fmt.Sprintf(`{"claudeAiOauth":{"accessToken":"%s","refreshToken":"%s","expiresAt":4102444800000,"scopes":["user:inference"],"clientId":"c","accountUuid":"%s","organizationUuid":"org-%s"}}`,
		access, refresh, account, account)
}
