package sandbox

import (
	"os"
	"strings"
	"testing"
)

// TestRunEnvRules: the Go API takes variables out of the command's environment as
// agentbox exec's --hide-secrets, --unset-env and --clear-env do, through Run and
// a Launcher alike (issue 35.7).
func TestRunEnvRules(t *testing.T) {
	if !asTestUser(t) {
		return
	}
	env := []string{"PATH=/usr/bin:/bin", "HOME=" + os.Getenv("HOME"), "GITHUB_TOKEN=gh", "MY_API_KEY=k", "PLAIN=p", "OTHER=o", "LC_ALL=C"}
	for name, run := range launchers(t) {
		t.Run(name, func(t *testing.T) {
			repo := newRepo(t)
			for _, c := range []struct {
				opts     Options
				in, gone []string
			}{
				{Options{SecretEnv: true}, []string{"PLAIN=p", "OTHER=o"}, []string{"GITHUB_TOKEN=gh", "MY_API_KEY=k"}},
				{Options{UnsetEnv: []string{"PLAIN"}}, []string{"GITHUB_TOKEN=gh", "OTHER=o"}, []string{"PLAIN=p"}},
				{Options{ClearEnv: true}, []string{"LC_ALL=C", "PATH=/usr/bin:/bin"}, []string{"PLAIN=p", "OTHER=o", "GITHUB_TOKEN=gh"}},
			} {
				out, err := os.CreateTemp(t.TempDir(), "out")
				if err != nil {
					t.Fatal(err)
				}
				opts := c.opts
				opts.Command, opts.Repo, opts.Dir, opts.Env, opts.Stdout = []string{"/usr/bin/env"}, repo, repo, env, out
				if res, err := run(opts); err != nil || res.Status != 0 {
					t.Fatalf("%+v: %v, status %d", c.opts, err, res.Status)
				}
				b, _ := os.ReadFile(out.Name())
				got := "\n" + string(b)
				for _, kv := range c.in {
					if !strings.Contains(got, "\n"+kv+"\n") {
						t.Errorf("%+v: %s missing:%s", c.opts, kv, got)
					}
				}
				for _, kv := range c.gone {
					if strings.Contains(got, "\n"+kv+"\n") {
						t.Errorf("%+v: %s handed in:%s", c.opts, kv, got)
					}
				}
			}
		})
	}
}
