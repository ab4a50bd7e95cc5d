package policy

import (
	"strings"
	"testing"
)

// TestSecretValue: --hide-secrets drops a credential by its value under any name —
// a URL with a password, an Authorization header, a private key, a token of a known
// shape — and keeps settings that only look near one, and a kept agent's own key.
func TestSecretValue(t *testing.T) {
	r := EnvRules{Secrets: true, KeepAgents: []string{"claude"}}
	for kv, drop := range map[string]bool{
		"DATABASE_URL=postgres://app:s3cret@db:5432/x":                        true,
		"PIP_EXTRA_INDEX_URL=https://pypi.org/simple https://u:p@corp/simple": true,
		"GIT_CONFIG_VALUE_0=AUTHORIZATION: basic eHg6eXk=":                    true,
		"DEPLOY_KEY_PEM=-----BEGIN OPENSSH PRIVATE KEY-----":                  true,
		"MY_GH=ghp_" + strings.Repeat("a", 36):                                true,
		"ID=AKIA" + strings.Repeat("B", 16):                                   true,
		"npm_config__auth=dXNlcjpwYXNz":                                       true,
		"DEPLOY_PRIVATE_KEY=x":                                                true,
		"ANTHROPIC_AUTH_TOKEN=sk-ant-oat01-" + strings.Repeat("c", 20):        false,
		"URL=https://user@example.com/x":                                      false,
		"URL=https://example.com/a:b@c":                                       false,
		"SKIN=sk-default":                                                     false,
		"EDITOR=vim":                                                          false,
		"PIP_INDEX_URL=https://pypi.org/simple":                               false,
		// Connection strings with a password field, under names no suffix takes.
		"PG_DSN=host=db user=app password=s3cret dbname=x":                       true,
		"JDBC=jdbc:mysql://db/x?user=app&password=s3cret":                        true,
		"SQLSRV=Server=db;Database=x;User Id=app;Pwd=s3cret;":                    true,
		"AZ_STORAGE=DefaultEndpointsProtocol=https;AccountName=a;AccountKey=k==": true,
		"OPTS=--password=s3cret":                                                 true,
		"PG_DSN_NOPASS=host=db user=app password= dbname=x":                      false,
		"LESS=-R --use-color":                                                    false,
		"GREP_COLORS=mt=01;31":                                                   false,
		"DB_PASS=s3cret":                                                         true,
		"DENO_AUTH_TOKENS=abc123@deno.land":                                      true,
		"FEATURES=passwordless=true":                                             false,
	} {
		name, value, _ := strings.Cut(kv, "=")
		if got := r.DropsEntry(name, value); got != drop {
			t.Errorf("%s: dropped %v, want %v", kv, got, drop)
		}
	}
}
