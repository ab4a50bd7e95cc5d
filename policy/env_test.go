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

// TestSecretEnvNames: --hide-secrets drops a credential variable whose name is a
// suffix alone (API_KEY, SECRET_KEY, TOKEN, PASSWORD), a key named for what it
// opens (RAILS_MASTER_KEY, APP_KEY, AZURE_STORAGE_KEY), a personal access token,
// Rails' SECRET_KEY_BASE, a listed name in another case, and tokens of more
// published shapes (Stripe, Vault, SendGrid, a JWT) under any name; it keeps
// the variables a shell and its tools need that only look near one.
func TestSecretEnvNames(t *testing.T) {
	r := EnvRules{Secrets: true}
	for kv, drop := range map[string]bool{
		"API_KEY=k1": true, "SECRET_KEY=k2": true, "TOKEN=k3": true, "PASSWORD=k4": true, "SECRET=k5": true,
		"APIKEY=k6": true, "PRIVATE_KEY=k7": true, "CREDENTIALS=k8": true,
		"RAILS_MASTER_KEY=k9": true, "APP_KEY=base64:k10": true, "AZURE_STORAGE_KEY=k11": true, "DD_APP_KEY=k12": true,
		"ENCRYPTION_KEY=k13": true, "AZURE_DEVOPS_EXT_PAT=k14": true, "SECRET_KEY_BASE=k15": true,
		"aws_access_key_id=AKIAX": true, "pgpassword=k16": true,
		"STRIPE=sk_live_" + strings.Repeat("a", 24):                          true,
		"VAULT=hvs.CAESIJ" + strings.Repeat("b", 20):                         true,
		"MAIL=SG." + strings.Repeat("c", 22) + "." + strings.Repeat("d", 43): true,
		"SUPA=eyJhbGciOiJIUzI1NiJ9.eyJyb2xlIjoic2VydmljZSJ9.c2lnbmF0dXJl":    true,
		"AGE=AGE-SECRET-KEY-1" + strings.Repeat("Q", 58):                     true,
		"PWD=/work/repo": false, "OLDPWD=/work": false, "PATH=/usr/bin": false, "MANPATH=/usr/share/man": false,
		"SSH_ASKPASS=/usr/bin/ssh-askpass": false, "GIT_ASKPASS=/usr/bin/x": false, "PASSWORD_STORE_DIR=/h/p": false,
		"KEYTIMEOUT=1": false, "MONKEY=1": false, "TOKENIZERS_PARALLELISM=false": false,
		"VERSION=eyJ.not.a.jwt": false, "SITE=SG.example": false, "EDITOR=vim": false,
	} {
		name, value, _ := strings.Cut(kv, "=")
		if got := r.DropsEntry(name, value); got != drop {
			t.Errorf("%s: dropped %v, want %v", kv, got, drop)
		}
	}
}
