package adversarial

import (
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
)

// TestGitConfigUnlistedForms: a nested repository planted in the session whose
// config makes the operator's Git run a program through forms the danger table did
// not list — an alias without "!" that sets -c core.fsmonitor ahead of its command
// (quoted too) or a plain command whose own option names a program
// (ls-remote --upload-pack=PROGRAM), Git 2.54's configured hooks (hook.NAME.command), and keys of tools
// that read Git's config (git-annex's commands and the options it gives ssh, git-secrets, tig), and a cookie file Git would
// rewrite (http.cookieFile = ~/.bashrc), a tig binding whose words a lone carriage
// return separates (a space to Git) and sendemail.smtpServerOption (an option of
// the sendmail program) — is found by the audit, and
// the operator's `git st` there runs nothing.
func TestGitConfigUnlistedForms(t *testing.T) {
	const plant = `set -e
mkdir -p wo/sub
git -C wo/sub init -q
git -C wo/sub config alias.st "-c core.fsmonitor=\"touch $PWNED/alias-c\" status"
git -C wo/sub config alias.ci "\"-c\" core.fsmonitor=\"touch $PWNED/alias-quoted\" commit"
mkdir -p wo/lr/sub
git -C wo/lr/sub init -q
printf '#!/bin/sh\ntouch %s/alias-upload-pack\nexec git-upload-pack "$@"\n' "$PWNED" >wo/lr/sub/up
chmod +x wo/lr/sub/up
git -C wo/lr/sub config alias.st "ls-remote --upload-pack=$PWD/wo/lr/sub/up ."
git -C wo/sub config hook.lint.event pre-commit
git -C wo/sub config hook.lint.command "touch $PWNED/hook-config"
git -C wo/sub config annex.freezecontent-command "touch $PWNED/annex"
git -C wo/sub config secrets.providers "touch $PWNED/secrets"
git -C wo/sub config remote.o.annex-ssh-options "-oProxyCommand=touch\ $PWNED/annex-ssh"
git -C wo/sub config tig.bind.generic "G !touch $PWNED/tig"
git -C wo/sub config http.cookieFile "$HOME/.bashrc"
git -C wo/sub config http.saveCookies true
mkdir -p wo/cr/sub
git -C wo/cr/sub init -q
printf '[tig "bind"]\n\tmain = G\r!%s/tig-cr\n[sendemail]\n\tsmtpServerOption = --passwordeval=%s/msmtp\n' "$PWNED" "$PWNED" >>wo/cr/sub/.git/config
`
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			x := newTarget(t, backend)
			cmd := x.Agentbox(x.Repo, "exec", "--backend", backend, "--no-git-save", "--", "/bin/sh", "-c", plant)
			cmd.Env = append(cmd.Env, "PWNED="+x.Pwned)
			r := sandboxtest.Run(cmd)
			for _, key := range []string{"alias.st", "alias.ci", "lr/sub/.git/config", "hook.lint.command",
				"annex.freezecontent-command", "secrets.providers", "remote.o.annex-ssh-options", "tig.bind.generic", "http.cookiefile",
				"tig.bind.main", "sendemail.smtpserveroption"} {
				if !strings.Contains(r.Stderr, key) {
					t.Errorf("the audit does not name %s:\n%s", key, r)
				}
			}
			checkNoPlant(t, x, x.Repo)
			if t.Failed() {
				t.Logf("session:\n%s", r)
			}
		})
	}
}
