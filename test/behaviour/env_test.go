package behaviour

import (
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
)

// TestSecretEnv: --hide-secrets drops credential variables (a kept agent keeps its
// own API key), --unset-env drops named ones, --clear-env keeps only the documented
// minimum and agentbox's own, and a repository's file may only add to them; on
// every backend (issue 35.7).
func TestSecretEnv(t *testing.T) {
	vars := []string{"AWS_SECRET_ACCESS_KEY=aws1", "GITHUB_TOKEN=gh1", "MY_SERVICE_API_KEY=svc1",
		"npm_config__authToken=npm1", "ANTHROPIC_API_KEY=ant1", "OPENAI_API_KEY=oai1",
		"PLAIN_SETTING=plain1", "LC_TIME=C", "TZ=UTC",
		// Credentials the name list did not catch: by a suffix it lacked, or only by
		// their value.
		"npm_config__auth=npmauth1", "DEPLOY_PRIVATE_KEY=pk1", "DATABASE_URL=postgres://app:dbpass1@db/x",
		"MY_GH=ghp_abcdefghijklmnopqrstuvwxyz0123456789", "GIT_CONFIG_VALUE_0=AUTHORIZATION: basic eHg6eXk=",
		"PLAIN_URL=https://example.com/a:b", "PG_DSN=host=db user=app password=dsnpass1 dbname=x",
		// A suffix alone as the name, a key named for what it opens, a JWT.
		"API_KEY=bare1", "RAILS_MASTER_KEY=rmk1", "SUPA=eyJhbGciOiJIUzI1NiJ9.eyJyb2xlIjoic2VydmljZSJ9.c2lnbmF0dXJl"}
	for _, backend := range backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			run := func(extra []string, args ...string) string {
				cmd := b.Command(b.Repo, args, "env")
				cmd.Env = append(cmd.Env, extra...)
				r := sandboxtest.Run(cmd)
				if r.Code != 0 {
					t.Fatalf("agentbox %v:\n%s", args, r)
				}
				return r.Stdout
			}
			has := func(env, kv string) bool { return strings.Contains("\n"+env, "\n"+kv+"\n") }
			want := func(what, env string, in, out []string) {
				for _, kv := range in {
					if !has(env, kv) {
						t.Errorf("%s: %s missing inside", what, kv)
					}
				}
				for _, kv := range out {
					if has(env, kv) {
						t.Errorf("%s: %s handed in", what, kv)
					}
				}
			}
			secret := []string{"AWS_SECRET_ACCESS_KEY=aws1", "GITHUB_TOKEN=gh1", "MY_SERVICE_API_KEY=svc1", "npm_config__authToken=npm1", "OPENAI_API_KEY=oai1",
				"npm_config__auth=npmauth1", "DEPLOY_PRIVATE_KEY=pk1", "DATABASE_URL=postgres://app:dbpass1@db/x",
				"MY_GH=ghp_abcdefghijklmnopqrstuvwxyz0123456789", "GIT_CONFIG_VALUE_0=AUTHORIZATION: basic eHg6eXk=",
				"PG_DSN=host=db user=app password=dsnpass1 dbname=x",
				"API_KEY=bare1", "RAILS_MASTER_KEY=rmk1", "SUPA=eyJhbGciOiJIUzI1NiJ9.eyJyb2xlIjoic2VydmljZSJ9.c2lnbmF0dXJl"}
			env := run(vars)
			want("no flag", env, append([]string{"PLAIN_SETTING=plain1"}, secret...), nil)
			env = run(vars, "--hide-secrets", "--keep-agent", "claude")
			want("--hide-secrets --keep-agent claude", env, []string{"ANTHROPIC_API_KEY=ant1", "PLAIN_SETTING=plain1", "PLAIN_URL=https://example.com/a:b"}, secret)
			env = run(vars, "--hide-secrets")
			want("--hide-secrets", env, nil, []string{"ANTHROPIC_API_KEY=ant1"})
			env = run(vars, "--unset-env", "PLAIN_SETTING", "--unset-env", "TZ")
			want("--unset-env", env, []string{"GITHUB_TOKEN=gh1", "LC_TIME=C"}, []string{"PLAIN_SETTING=plain1", "TZ=UTC"})
			env = run(vars, "--clear-env")
			want("--clear-env", env, []string{"LC_TIME=C", "TZ=UTC", "AGENTBOX=1", "HOME=" + b.Home}, append([]string{"PLAIN_SETTING=plain1", "GIT_AUTHOR_NAME=t"}, secret...))
			if !strings.Contains(env, "\nPATH=") && !strings.HasPrefix(env, "PATH=") {
				t.Errorf("--clear-env dropped PATH:\n%s", env)
			}
			// A repository's file may add to them, never take them back.
			writeUser(t, b.Repo+"/.agentbox.toml", "unset-env = [\"PLAIN_SETTING\"]\nclear-env = true\n")
			env = run(vars)
			want("repository file", env, []string{"LC_TIME=C"}, []string{"PLAIN_SETTING=plain1", "GITHUB_TOKEN=gh1"})
			writeUser(t, b.Repo+"/.agentbox.toml", "clear-env = false\n")
			if r := sandboxtest.Run(b.Command(b.Repo, nil, "true")); r.Code != 125 || !strings.Contains(r.Stderr, "clear-env") {
				t.Errorf("clear-env = false in a repository's file:\n%s", r)
			}
			if r := sandboxtest.Run(b.Command(b.Repo, []string{"--unset-env", "A=B"}, "true")); r.Code != 125 || !strings.Contains(r.Stderr, "not a variable name") {
				t.Errorf("--unset-env A=B:\n%s", r)
			}
		})
	}
}

// TestSecretEnvGoAPI: the Go API's SecretEnv drops the same variables as
// --hide-secrets (policy.EnvRules), by name, by a suffix alone as the name, and by
// value; ordinary settings stay.
func TestSecretEnvGoAPI(t *testing.T) {
	b := sandboxtest.NewBox(t, sandboxtest.GoAPI)
	secret := []string{"GITHUB_TOKEN=gh1", "API_KEY=bare1", "RAILS_MASTER_KEY=rmk1",
		"SUPA=eyJhbGciOiJIUzI1NiJ9.eyJyb2xlIjoic2VydmljZSJ9.c2lnbmF0dXJl", "DATABASE_URL=postgres://app:dbpass1@db/x"}
	cmd := b.Command(b.Repo, []string{"--secret-env"}, "env")
	cmd.Env = append(cmd.Env, append([]string{"PLAIN_SETTING=plain1"}, secret...)...)
	r := sandboxtest.Run(cmd)
	if r.Code != 0 {
		t.Fatalf("godoor --secret-env:\n%s", r)
	}
	env := "\n" + r.Stdout
	if !strings.Contains(env, "\nPLAIN_SETTING=plain1\n") {
		t.Errorf("PLAIN_SETTING missing inside:\n%s", r.Stdout)
	}
	for _, kv := range secret {
		if strings.Contains(env, "\n"+kv+"\n") {
			t.Errorf("%s handed in through the Go API's SecretEnv", kv)
		}
	}
}
