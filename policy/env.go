package policy

import (
	"fmt"
	"slices"
	"strings"
)

// EnvRules say which variables of the launcher's environment the command does not
// get (--hide-secrets, --unset-env, --clear-env). Both doors apply them to the
// environment they hand the backend: the CLI's session and the Go API.
type EnvRules struct {
	Unset   []string // --unset-env NAME (repeatable): dropped whatever else holds
	Secrets bool     // --hide-secrets: SecretEnv is dropped, but for kept agents' own
	Clear   bool     // --clear-env: only ClearEnvKeeps survives
	// KeepAgents are the kept presets (--keep-agent), whose own API keys
	// (AgentEnv) stay with Secrets.
	KeepAgents []string
}

// SecretEnv are the well-known credential variables --hide-secrets drops: cloud
// keys, forge and registry tokens, model providers' API keys, database passwords.
// Names ending in one of SecretEnvSuffixes are dropped too.
var SecretEnv = []string{
	"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN",
	"AZURE_CLIENT_SECRET", "AZURE_CLIENT_CERTIFICATE_PASSWORD", "GOOGLE_APPLICATION_CREDENTIALS",
	"GITHUB_TOKEN", "GH_TOKEN", "GH_ENTERPRISE_TOKEN", "GITHUB_PAT", "GITLAB_TOKEN", "GL_TOKEN",
	"NPM_TOKEN", "NODE_AUTH_TOKEN", "YARN_NPM_AUTH_TOKEN", "CARGO_REGISTRY_TOKEN",
	"TWINE_USERNAME", "TWINE_PASSWORD", "PYPI_TOKEN", "DOCKER_PASSWORD", "DOCKER_AUTH_CONFIG",
	"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "OPENAI_API_KEY",
	"CODEX_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY", "MISTRAL_API_KEY", "GROQ_API_KEY",
	"OPENROUTER_API_KEY", "DEEPSEEK_API_KEY", "XAI_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN",
	"VAULT_TOKEN", "CLOUDFLARE_API_TOKEN", "DIGITALOCEAN_ACCESS_TOKEN", "HEROKU_API_KEY",
	"SENTRY_AUTH_TOKEN", "SLACK_TOKEN", "STRIPE_API_KEY", "PGPASSWORD", "MYSQL_PWD",
	"BW_SESSION", "OP_SERVICE_ACCOUNT_TOKEN",
}

// SecretEnvSuffixes catch the credential variables SecretEnv does not name
// (compared upper-case: npm's npm_config__authToken too). A name that is a suffix
// without its underscore is one too: TOKEN, API_KEY, SECRET_KEY, PASSWORD.
//
// _KEY: a key named for what it opens (RAILS_MASTER_KEY, Laravel's APP_KEY,
// AZURE_STORAGE_KEY, Datadog's DD_APP_KEY, an ENCRYPTION_KEY or SIGNING_KEY); a
// variable that only names a key's file (GIT_SSL_KEY) loses nothing inside, where
// the file is hidden. _PAT: a personal access token (Azure DevOps'
// AZURE_DEVOPS_EXT_PAT). _SECRETS, _SECRET_KEY_BASE: Rails' SECRET_KEY_BASE.
var SecretEnvSuffixes = []string{"_TOKEN", "_SECRET", "_SECRET_KEY", "_API_KEY", "_APIKEY", "_PASSWORD", "_AUTHTOKEN", "_ACCESS_KEY",
	"_AUTH", "_AUTH_IDENT", "_PRIVATE_KEY", "_CREDENTIALS", "_CREDS", "_PASSPHRASE", "_PASSWD", "_CONNECTION_STRING",
	"_PASS", "_TOKENS", // DB_PASS, SMTP_PASS; Deno's DENO_AUTH_TOKENS=TOKEN@HOST
	"_KEY", "_PAT", "_SECRETS", "_SECRET_KEY_BASE"}

// secretValuePrefixes are the published shapes of common tokens (GitHub, GitLab,
// Anthropic, OpenAI, Slack, npm, PyPI, Hugging Face, AWS, Google, DigitalOcean,
// Shopify, Stripe, HashiCorp Vault, SendGrid, Google's OAuth access tokens, Doppler,
// Tailscale, Sentry, Grafana, Supabase, Linear, age's secret keys): a value of one is
// a credential under any variable name. A prefix with a dot takes dots after it.
var secretValuePrefixes = []string{"ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "glpat-", "glrt-",
	"glptt-", "gldt-", "sk-", "xoxb-", "xoxp-", "xoxa-", "xoxs-", "xoxe.", "xapp-", "npm_", "pypi-", "hf_",
	"AKIA", "ASIA", "AIza", "dop_v1_", "doo_v1_", "shpat_", "shpss_", "sk_live_", "sk_test_", "rk_live_",
	"rk_test_", "whsec_", "hvs.", "hvb.", "SG.", "ya29.", "dp.st.", "dp.pt.", "tskey-", "sntrys_", "sntryu_",
	"glsa_", "sbp_", "lin_api_", "AGE-SECRET-KEY-"}

// SecretEnvPrefixes are families of session secrets (1Password's CLI).
var SecretEnvPrefixes = []string{"OP_SESSION_"}

// AgentEnv are the variables an agent's preset keeps under --hide-secrets: its own
// API key, without which it could not work.
// A switch, not a map, so that no start of agentbox builds it.
func AgentEnv(agent string) []string {
	switch agent {
	case "claude":
		return []string{"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"}
	case "codex":
		return []string{"OPENAI_API_KEY", "CODEX_API_KEY"}
	}
	return nil
}

// ClearEnvKeeps are the variables --clear-env keeps: what a shell and terminal
// programs need to start. AGENTBOX* and the proxy variables of --allow-net are set
// by agentbox and stay; so does SSH_AUTH_SOCK, which survives only when handed in
// (--allow-socket).
var ClearEnvKeeps = []string{"PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "LANGUAGE", "TZ", "COLORTERM", "SSH_AUTH_SOCK"}

// IsSecretEnv says whether --hide-secrets drops name.
func IsSecretEnv(name string) bool {
	up := strings.ToUpper(name)
	if slices.Contains(SecretEnv, up) {
		return true
	}
	for _, s := range SecretEnvSuffixes {
		// "_"+up: the suffix alone is a name too (TOKEN, API_KEY).
		if strings.HasSuffix("_"+up, s) {
			return true
		}
	}
	for _, p := range SecretEnvPrefixes {
		if strings.HasPrefix(up, p) {
			return true
		}
	}
	return false
}

// IsSecretValue says whether --hide-secrets drops a variable for its value, whatever
// its name: a URL that carries a password (DATABASE_URL, PIP_INDEX_URL, a proxy's)
// or a connection string with a password field (hasSecretField),
// an HTTP Authorization header (GIT_CONFIG_VALUE_0=Authorization: …), a PEM private
// key, or a token of a published shape.
func IsSecretValue(v string) bool {
	low := strings.ToLower(v)
	if strings.Contains(low, "authorization:") || strings.HasPrefix(low, "bearer ") ||
		strings.HasPrefix(low, "basic ") || strings.Contains(v, "PRIVATE KEY-----") {
		return true
	}
	if hasSecretField(low) {
		return true
	}
	for rest := v; ; {
		i := strings.Index(rest, "://")
		if i < 0 {
			break
		}
		rest = rest[i+3:]
		authority := rest
		if j := strings.IndexAny(authority, "/?# \t\n,;"); j >= 0 {
			authority = authority[:j]
		}
		if at := strings.LastIndexByte(authority, '@'); at >= 0 {
			if _, pass, ok := strings.Cut(authority[:at], ":"); ok && pass != "" {
				return true
			}
		}
	}
	for _, p := range secretValuePrefixes {
		if strings.HasPrefix(v, p) && len(v) >= 20 && tokenChars(v, strings.Contains(p, ".")) {
			return true
		}
	}
	return isJWT(v)
}

// isJWT: v is a JSON Web Token (header.payload.signature, base64url, the header's
// JSON beginning `{"`), which a service accepts as the bearer's login whatever
// variable holds it (Supabase's keys, a CI's OIDC token).
func isJWT(v string) bool {
	return strings.HasPrefix(v, "eyJ") && len(v) >= 20 && strings.Count(v, ".") == 2 &&
		!strings.Contains(v, "..") && tokenChars(v, true)
}

// secretFields are the keys of key=value connection strings that hold a secret:
// libpq's "host=db password=…", JDBC's "?user=…&password=…", ODBC's and Azure's
// "…;Pwd=…;" and "AccountKey=…".
var secretFields = []string{"password", "passwd", "pwd", "accountkey", "sharedaccesskey", "secret", "token"}

// hasSecretField says whether low (a lower-cased value) holds a field of
// secretFields with a value: the key at the start or after a space, ';', '&', '?',
// ',' or '-' (--password=), then '=' and a byte that is not a separator.
func hasSecretField(low string) bool {
	for _, f := range secretFields {
		for i := 0; ; {
			j := strings.Index(low[i:], f+"=")
			if j < 0 {
				break
			}
			at, end := i+j, i+j+len(f)+1
			i = end
			if at > 0 && !strings.ContainsRune(" \t;&?,-", rune(low[at-1])) {
				continue
			}
			if end < len(low) && !strings.ContainsRune(" \t;&,", rune(low[end])) {
				return true
			}
		}
	}
	return false
}

// tokenChars: v is one word of the characters tokens are made of (and dots, for
// the shapes that have them).
func tokenChars(v string, dots bool) bool {
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || dots && c == '.') {
			return false
		}
	}
	return true
}

// clearKeeps says whether --clear-env keeps name.
func clearKeeps(name string) bool {
	return slices.Contains(ClearEnvKeeps, name) || strings.HasPrefix(name, "LC_") ||
		strings.HasPrefix(name, "AGENTBOX")
}

// Drops says whether the command does not get the variable name.
func (r EnvRules) Drops(name string) bool {
	if slices.Contains(r.Unset, name) {
		return true
	}
	if r.Clear && !clearKeeps(name) {
		return true
	}
	if r.Secrets && IsSecretEnv(name) {
		return !r.agentKeeps(name)
	}
	return false
}

// agentKeeps says whether a kept agent's preset keeps name under --hide-secrets.
func (r EnvRules) agentKeeps(name string) bool {
	for _, a := range r.KeepAgents {
		if slices.Contains(AgentEnv(a), name) {
			return true
		}
	}
	return false
}

// DropsEntry says whether the command does not get the variable name=value: by
// its name (Drops), or under --hide-secrets by its value (IsSecretValue).
func (r EnvRules) DropsEntry(name, value string) bool {
	return r.Drops(name) || r.Secrets && IsSecretValue(value) && !r.agentKeeps(name)
}

// Apply is env ("NAME=value" entries) without what the rules drop.
func (r EnvRules) Apply(env []string) []string {
	if len(r.Unset) == 0 && !r.Secrets && !r.Clear {
		return env
	}
	out := make([]string, 0, len(env))
	for _, kv := range env {
		name, value, _ := strings.Cut(kv, "=")
		if !r.DropsEntry(name, value) {
			out = append(out, kv)
		}
	}
	return out
}

// CheckEnvName refuses a --unset-env value that is no variable name.
func CheckEnvName(name string) error {
	if name == "" || strings.ContainsAny(name, "=\x00") {
		return &Error{What: "--unset-env", Path: name, Reason: "is not a variable name (give NAME, without =value)"}
	}
	return nil
}

// resolveEnv validates the environment options into p.Env.
func resolveEnv(p *Policy, opts Options) error {
	for _, n := range opts.UnsetEnv {
		if err := CheckEnvName(n); err != nil {
			return err
		}
		if !slices.Contains(p.Env.Unset, n) {
			p.Env.Unset = append(p.Env.Unset, n)
		}
	}
	p.Env.Secrets, p.Env.Clear = opts.HideSecrets, opts.ClearEnv
	p.Env.KeepAgents = p.KeepAgents
	return nil
}

// narrowEnv: what the command does not get stays not got.
func narrowEnv(b, a *Policy) string {
	switch {
	case b.Env.Clear && !a.Env.Clear:
		return "would turn --clear-env off"
	case b.Env.Secrets && !a.Env.Secrets:
		return "would hand the credential variables of --hide-secrets in"
	}
	for _, n := range b.Env.Unset {
		if !slices.Contains(a.Env.Unset, n) {
			return fmt.Sprintf("would hand %s in, which --unset-env drops", quote(n))
		}
	}
	for _, k := range a.Env.KeepAgents {
		if !slices.Contains(b.Env.KeepAgents, k) {
			return "would keep " + quote(k) + "'s API key, which the user's policy does not"
		}
	}
	return ""
}
