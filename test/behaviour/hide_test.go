package behaviour

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestHide: --hide and --hide-secrets (issue 16, P11) on every backend — a hidden
// directory or file is there and empty, and read-only; the host keeps its content;
// the secrets preset hides the known stores, SSH private keys but not public ones,
// and leaves a kept agent's own credentials readable; bad paths are refused with 125.
func TestHide(t *testing.T) {
	rows := []struct {
		name string
		fn   func(t *testing.T, b *sandboxtest.Box)
	}{
		{"--hide: a directory and a file are empty and read-only", hideWorks},
		{"--hide-secrets: the known stores, not public keys or a kept agent's", hideSecrets},
		{"--hide-secrets: stores a variable moves, keys in subdirectories, stores of more tools", hideSecretsMoved},
		{"--hide-secrets: a Git config that holds a credential itself", hideSecretsGitConfig},
		{"--hide-secrets: a CI token in the repository's own Git configs", hideSecretsRepoGitConfig},
		{"--hide-secrets: shell and REPL histories, silently", hideSecretsHistories},
		{"--hide refusals: 125 and one line", hideRefusals},
		{"--hide: a directory outside HOME holding a host daemon's socket", hideSocketDir},
	}
	for _, backend := range backends(t) {
		t.Run(backend, func(t *testing.T) {
			for _, r := range rows {
				t.Run(r.name, func(t *testing.T) { r.fn(t, sandboxtest.NewBox(t, backend)) })
			}
		})
	}
}

func hideWorks(t *testing.T, b *sandboxtest.Box) {
	h := b.Home
	mkdirUser(t, h+"/secret")
	writeUser(t, h+"/secret/key", "SECRET\n")
	writeUser(t, b.Repo+"/.env", "TOKEN=1\n")
	out := b.OK(`ls -A ~/secret | wc -l; cat ~/secret/key 2>/dev/null; wc -c < .env; test -d ~/secret && test -f .env && echo types-kept
touch ~/secret/new 2>/dev/null && echo dir-writable; echo x > .env 2>/dev/null && echo file-writable
rmdir ~/secret 2>/dev/null && echo removed; true`, "--hide", "~/secret", "--hide", ".env")
	if strings.Contains(out, "SECRET") || !strings.HasPrefix(out, "0\n0\ntypes-kept\n") || strings.Contains(out, "writable") || strings.Contains(out, "removed") {
		t.Errorf("inside:\n%s", out)
	}
	if sandboxtest.ReadFileOr(h+"/secret/key") != "SECRET\n" || sandboxtest.ReadFileOr(b.Repo+"/.env") != "TOKEN=1\n" {
		t.Errorf("the host's hidden files changed")
	}
}

func hideSecrets(t *testing.T, b *sandboxtest.Box) {
	h := b.Home
	mkdirUser(t, h+"/.ssh")
	writeUser(t, h+"/.ssh/id_ed25519", "PRIVATE\n")
	writeUser(t, h+"/.ssh/id_ed25519.pub", "PUBLIC\n")
	writeUser(t, h+"/.ssh/known_hosts", "HOSTS\n")
	mkdirUser(t, h+"/.aws")
	writeUser(t, h+"/.aws/credentials", "AWS\n")
	mkdirUser(t, h+"/.codex")
	writeUser(t, h+"/.codex/auth.json", "CODEXAUTH\n")
	mkdirUser(t, h+"/.claude")
	writeUser(t, h+"/.claude/.credentials.json", "CLAUDEAUTH\n")
	mkdirUser(t, h+"/dotfiles")
	writeUser(t, h+"/dotfiles/netrc", "NETRC\n")
	if err := os.Symlink(h+"/dotfiles/netrc", h+"/.netrc"); err != nil {
		t.Fatal(err)
	}
	out := b.OK(`cat ~/.ssh/id_ed25519 ~/.ssh/id_ed25519.pub ~/.ssh/known_hosts ~/.aws/credentials ~/.codex/auth.json ~/.claude/.credentials.json ~/.netrc 2>&1; true`,
		"--hide-secrets", "--keep-agent", "codex")
	for _, gone := range []string{"PRIVATE", "AWS", "CLAUDEAUTH", "NETRC"} {
		if strings.Contains(out, gone) {
			t.Errorf("%s readable inside:\n%s", gone, out)
		}
	}
	for _, kept := range []string{"PUBLIC", "HOSTS", "CODEXAUTH"} {
		if !strings.Contains(out, kept) {
			t.Errorf("%s not readable inside:\n%s", kept, out)
		}
	}
}

// hideSecretsMoved: a tool reads its store where its variable says ($GNUPGHOME,
// $XDG_CONFIG_HOME/gh, the file GOOGLE_APPLICATION_CREDENTIALS names, a KUBECONFIG
// list), an SSH key may sit in a subdirectory of ~/.ssh beside a ControlMaster
// socket, and Git's cookie file, Maven's settings and a snap Firefox are stores
// too, as are the key GIT_SSH_COMMAND names with -i, COMPOSER_HOME's auth.json and
// Docker's TLS client key: none is readable inside; the public key and the ssh
// config are.
func hideSecretsMoved(t *testing.T, b *sandboxtest.Box) {
	h := b.Home
	files := map[string]string{
		"/keys/gpg/private-keys-v1.d/k.key": "GPGKEY",
		"/xdg/gh/hosts.yml":                 "GHTOKEN",
		"/creds/sa.json":                    "SAKEY",
		"/kube/b.conf":                      "KUBEB",
		"/.ssh/keys/id_work":                "SSHSUBKEY",
		"/.ssh/keys/id_work.pub":            "SSHPUBLIC",
		"/.ssh/config":                      "SSHCONFIG\nInclude config.d/*\nIdentityFile ~/keys/work_key",
		"/.ssh/config.d/extra":              "SSHINCLUDED\nIdentityFile=%d/keys2/other",
		"/keys/work_key":                    "NAMEDKEY",
		"/keys2/other":                      "INCLUDEDKEY",
		"/.gitcookies":                      "GITCOOKIE",
		"/.m2/settings.xml":                 "MAVENPASS",
		"/snap/firefox/common/.mozilla/firefox/p/cookies.sqlite": "FIREFOXSNAP",
		"/deploy/key":      "GITSSHKEY",
		"/comp/auth.json":  "COMPOSERAUTH",
		"/.docker/key.pem": "DOCKERTLSKEY",
		// Stores the list had missed (wt/red25a): OpenStack's passwords, Teleport's
		// keys, pnpm's global rc where XDG_CONFIG_HOME moves it, another agent's keys.
		"/.config/openstack/clouds.yaml":   "OPENSTACKPASS",
		"/.tsh/keys/proxy/user":            "TELEPORTKEY",
		"/xdg/pnpm/rc":                     "PNPMTOKEN",
		"/.local/share/opencode/auth.json": "OPENCODEKEY",
	}
	script := ""
	for rel, content := range files {
		mkdirUser(t, filepath.Dir(h+rel))
		writeUser(t, h+rel, content+"\n")
		script += "cat '" + h + rel + "' 2>&1\n"
	}
	// ControlMaster sockets, at the top and below: not hidden, and no refusal.
	for _, sock := range []string{h + "/.ssh/cm-top", h + "/.ssh/keys/cm-sock"} {
		ln, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		testenv.Chown(t, sock)
	}
	cmd := b.Command(b.Repo, []string{"--hide-secrets"}, script+"true")
	cmd.Env = append(cmd.Env, "GNUPGHOME="+h+"/keys/gpg", "XDG_CONFIG_HOME="+h+"/xdg",
		"GOOGLE_APPLICATION_CREDENTIALS="+h+"/creds/sa.json", "KUBECONFIG="+h+"/kube/a.conf:"+h+"/kube/b.conf",
		"GIT_SSH_COMMAND=ssh -i "+h+"/deploy/key -o IdentitiesOnly=yes", "COMPOSER_HOME="+h+"/comp")
	r := sandboxtest.Run(cmd)
	if r.Code != 0 {
		t.Fatalf("--hide-secrets with the stores moved:\n%s", r)
	}
	for _, kept := range []string{"SSHPUBLIC", "SSHCONFIG", "SSHINCLUDED"} {
		if !strings.Contains(r.Stdout, kept) {
			t.Errorf("%s not readable inside:\n%s", kept, r)
		}
	}
	for _, content := range files {
		if !strings.HasPrefix(content, "SSHPUBLIC") && !strings.HasPrefix(content, "SSHCONFIG") && !strings.HasPrefix(content, "SSHINCLUDED") && strings.Contains(r.Stdout, content) {
			t.Errorf("%s readable inside", content)
		}
	}
	if t.Failed() {
		t.Logf("inside:\n%s", r)
	}
}

// hideSocketDir: a hidden directory outside HOME, /tmp and /run in which a host
// daemon listens. The hide covers the socket already; a mask of it too (HostSockets)
// made bwrap fail the launch (it cannot create the mount point in the read-only
// empty stand-in), so --hide of such a directory could not be used with bwrap.
func hideSocketDir(t *testing.T, b *sandboxtest.Box) {
	dir, err := os.MkdirTemp("/var/tmp", "agentbox-hide-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := dir + "/daemon.sock"
	testenv.ServeUnix(t, sock, "agentbox-host")
	out := b.OK(`ls -A "`+dir+`" | wc -l; socat -u UNIX-CONNECT:"`+sock+`" - 2>/dev/null; true`, "--hide", dir)
	if out != "0\n" {
		t.Errorf("inside, want the hidden directory empty and the socket unreachable:\n%s", out)
	}
}

func hideRefusals(t *testing.T, b *sandboxtest.Box) {
	h := b.Home
	mkdirUser(t, h+"/.claude")
	cases := []struct {
		args []string
		why  string
	}{
		{[]string{"--hide", "/"}, "root directory"},
		{[]string{"--hide", h}, "contains the repository"},
		{[]string{"--hide", b.Repo + "/.git/hooks"}, "Git metadata"},
		{[]string{"--hide", "/proc/self"}, "lies in /proc"},
		{[]string{"--hide", "/tmp"}, "lies in /tmp"},
		{[]string{"--hide", h + "/missing"}, "does not exist"},
		{[]string{"--hide", h + "/.claude", "--keep-agent", "claude"}, "contains the kept path"},
		{[]string{"--hide", h + "/.cache"}, "agentbox's own state or cache"},
	}
	for _, c := range cases {
		r := sandboxtest.Run(b.Command(b.Repo, append([]string{"--no-record", "--no-git-save"}, c.args...), "echo RAN"))
		lines := strings.Split(strings.TrimSpace(r.Stderr), "\n")
		if r.Code != 125 || len(lines) != 1 || !strings.Contains(lines[0], c.why) || strings.Contains(r.Stdout, "RAN") {
			t.Errorf("%v: want 125 and one line with %q, got %s", c.args, c.why, r)
		}
	}
}

// hideSecretsGitConfig: the operator's Git config that holds a token (in the URL of
// url.<base>.insteadOf) and an included one with sendemail.smtpPass are empty
// inside under --hide-secrets, an include without a credential stays, and the line
// at launch names the file, line and key but not the token.
func hideSecretsGitConfig(t *testing.T, b *sandboxtest.Box) {
	h := b.Home
	token := "ghp_" + strings.Repeat("G", 36)
	writeUser(t, h+"/.gitconfig", "[include]\n\tpath = ~/.gitconfig-mail\n\tpath = ~/.gitconfig-plain\n"+
		"[url \"https://x-access-token:"+token+"@github.com/\"]\n\tinsteadOf = https://github.com/\n")
	writeUser(t, h+"/.gitconfig-mail", "[sendemail]\n\tsmtpPass = SMTPSECRET\n")
	writeUser(t, h+"/.gitconfig-plain", "[alias]\n\tplainalias = status\n")
	r := b.Sh(`cat ~/.gitconfig ~/.gitconfig-mail ~/.gitconfig-plain; git config --global --list; true`, "--hide-secrets")
	if r.Code != 0 {
		t.Fatalf("--hide-secrets:\n%s", r)
	}
	if strings.Contains(r.Stdout, token) || strings.Contains(r.Stdout, "SMTPSECRET") {
		t.Errorf("a credential in the Git config is readable inside:\n%s", r.Stdout)
	}
	if !strings.Contains(r.Stdout, "plainalias") {
		t.Errorf("an included Git config without a credential is not readable inside:\n%s", r.Stdout)
	}
	if !strings.Contains(r.Stderr, h+"/.gitconfig is empty inside: line 5 (url.<…>.insteadof) holds a credential") ||
		!strings.Contains(r.Stderr, "line 2 (sendemail.smtppass)") || strings.Contains(r.Stderr, token) {
		t.Errorf("the line at launch:\n%s", r.Stderr)
	}
	if sandboxtest.ReadFileOr(h+"/.gitconfig-mail") != "[sendemail]\n\tsmtpPass = SMTPSECRET\n" {
		t.Errorf("the host's Git config changed")
	}
}

// hideSecretsRepoGitConfig: a CI checkout's token in the repository's .git/config
// (actions/checkout's extraheader, a remote URL with user:token@, an insteadOf
// naming a token) and in a submodule's config is not readable inside under
// --hide-secrets, by path, by an fd's /proc link or through git config; Git still
// works (the remote without its credential, core.*, log); the launch lines name
// file, line and key and not the token; the host's file is unchanged.
func hideSecretsRepoGitConfig(t *testing.T, b *sandboxtest.Box) {
	header := "AUTHORIZATION: basic " + "eC1hY2Nlc3MtdG9rZW46Z2hzX0hFQURFUkhFQURFUkhFQURFUkhFQURFUkhFQURFUg=="
	remote := "ghs_" + strings.Repeat("R", 36)
	instead := "ghp_" + strings.Repeat("I", 36)
	sub := "ghs_" + strings.Repeat("S", 36)
	testenv.Git(t, b.Home, b.Repo, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "--allow-empty", "-m", "first")
	config := "[core]\n\trepositoryformatversion = 0\n\tbare = false\n" +
		"[http \"https://github.com/\"]\n\textraheader = " + header + "\n" +
		"[remote \"origin\"]\n\turl = https://x-access-token:" + remote + "@github.com/o/r.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n" +
		"[url \"https://" + instead + "@github.com/\"]\n\tinsteadOf = https://github.com/\n" +
		"[alias]\n\tkeptalias = status\n"
	writeUser(t, b.Repo+"/.git/config", config)
	mkdirUser(t, b.Repo+"/.git/modules/lib")
	writeUser(t, b.Repo+"/.git/modules/lib/config", "[core]\n\tbare = false\n[http \"https://github.com/\"]\n\textraheader = AUTHORIZATION: basic "+sub+"\n")
	r := b.Sh(`cat .git/config .git/modules/lib/config; cat /proc/self/fd/3 3<.git/config; git config -l; git remote -v; git log --oneline; git config core.bare; git keptalias >/dev/null && echo alias-works
echo x >> .git/config 2>/dev/null && echo config-writable; true`, "--hide-secrets")
	if r.Code != 0 {
		t.Fatalf("--hide-secrets:\n%s", r)
	}
	for _, secret := range []string{header[len("AUTHORIZATION: basic "):], remote, instead, sub} {
		if strings.Contains(r.Stdout, secret) || strings.Contains(r.Stderr, secret) {
			t.Errorf("a credential of the repository's Git config is readable inside or shown:\n%s", r)
		}
	}
	for _, want := range []string{"origin\thttps://github.com/o/r.git (fetch)", "first\n", "false\n", "alias-works", "remote.origin.fetch=+refs/heads/*:refs/remotes/origin/*"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("Git inside lost %q:\n%s", want, r.Stdout)
		}
	}
	if strings.Contains(r.Stdout, "config-writable") {
		t.Errorf(".git/config writable inside:\n%s", r.Stdout)
	}
	cfg := "--hide-secrets: " + b.Repo + "/.git/config is a copy inside: "
	for _, want := range []string{cfg + "line 5 (http.<…>.extraheader) holds a credential, left out",
		cfg + "line 7 (remote.<…>.url) holds a credential in its URL, left out of it",
		cfg + "line 10 (url.<…>.insteadof) holds a credential, left out",
		"--hide-secrets: " + b.Repo + "/.git/modules/lib/config is a copy inside: line 4 (http.<…>.extraheader)"} {
		if !strings.Contains(r.Stderr, want) {
			t.Errorf("the line at launch %q is missing:\n%s", want, r.Stderr)
		}
	}
	// A review session (--read-only) binds no Git path of its own, and reads the
	// same copy.
	ro := b.Sh(`cat .git/config .git/modules/lib/config; git remote -v`, "--read-only", "--hide-secrets")
	if ro.Code != 0 || !strings.Contains(ro.Stdout, "https://github.com/o/r.git (fetch)") {
		t.Fatalf("--read-only --hide-secrets:\n%s", ro)
	}
	for _, secret := range []string{remote, instead, sub, "eC1hY2Nlc3M"} {
		if strings.Contains(ro.Stdout, secret) {
			t.Errorf("--read-only: a credential of the repository's Git config is readable inside:\n%s", ro.Stdout)
		}
	}
	// A linked worktree reads the main repository's config from its common dir,
	// writable with the worktree, or read-only under --read-only: the same copy.
	wt := b.Home + "/wt"
	testenv.Git(t, b.Home, b.Repo, "worktree", "add", "-q", wt)
	for _, mode := range [][]string{{"--hide-secrets"}, {"--read-only", "--hide-secrets"}} {
		lw := sandboxtest.Run(b.Command(wt, mode, `cat "$(git rev-parse --git-common-dir)/config"; git remote -v`))
		if lw.Code != 0 || !strings.Contains(lw.Stdout, "https://github.com/o/r.git (fetch)") {
			t.Fatalf("a linked worktree, %v:\n%s", mode, lw)
		}
		for _, secret := range []string{remote, instead, "eC1hY2Nlc3M"} {
			if strings.Contains(lw.Stdout, secret) {
				t.Errorf("a linked worktree, %v: a credential of the common config is readable inside:\n%s", mode, lw.Stdout)
			}
		}
	}
	if sandboxtest.ReadFileOr(b.Repo+"/.git/config") != config {
		t.Errorf("the host's .git/config changed")
	}
}

// hideSecretsHistories: --hide-secrets hides the shells' and REPLs' histories
// (policy.Histories, $HISTFILE) behind /dev/null: empty inside, and bash, zsh, fish
// and Python run interactively and exit without a word, their writes dropped (an
// empty read-only file made zsh print "failed to write history file" at each exit);
// the host's files keep their content. On main every history was readable.
func hideSecretsHistories(t *testing.T, b *sandboxtest.Box) {
	h := b.Home
	mkdirUser(t, h+"/.local/share/fish")
	mkdirUser(t, h+"/hist")
	files := map[string]string{
		h + "/.bash_history":                  "export TOKEN=bash-secret\n",
		h + "/.zsh_history":                   ": 1700000000:0;export PW=zsh-secret\n",
		h + "/.local/share/fish/fish_history": "- cmd: set -x K fish-secret\n  when: 1700000000\n",
		h + "/.python_history":                "key = 'python-secret'\n",
		h + "/.psql_history":                  "ALTER USER u PASSWORD 'psql-secret';\n",
		h + "/hist/moved":                     "histfile-secret\n",
	}
	for f, c := range files {
		writeUser(t, f, c)
	}
	cmd := b.Command(b.Repo, []string{"--hide-secrets"}, `cat ~/.bash_history ~/.zsh_history ~/.local/share/fish/fish_history ~/.python_history ~/.psql_history "$HISTFILE"
echo 'echo bash-ran' | bash -i
echo 'echo zsh-ran' | HISTFILE=~/.zsh_history SAVEHIST=100 zsh -i
echo 'echo fish-ran' | fish -i
echo 'print("python-ran")' | python3 -i
cat ~/.bash_history ~/.zsh_history ~/.local/share/fish/fish_history ~/.python_history; echo end`)
	cmd.Env = append(cmd.Env, "HISTFILE="+h+"/hist/moved", "TERM=dumb")
	r := sandboxtest.Run(cmd)
	out := r.Stdout + r.Stderr
	for _, ran := range []string{"bash-ran", "zsh-ran", "fish-ran", "python-ran", "end"} {
		if !strings.Contains(r.Stdout, ran) {
			t.Errorf("%s missing: %s", ran, r)
		}
	}
	if strings.Contains(out, "secret") {
		t.Errorf("a history was readable inside: %s", r)
	}
	// What an interactive shell prints at start without a terminal is its own; what
	// a history file refused would add is not there.
	for _, noise := range []string{"history", "Read-only", "read-only", "Permission denied", "No such"} {
		if strings.Contains(r.Stderr, noise) {
			t.Errorf("a shell complained about its history (%q): %s", noise, r)
		}
	}
	for f, c := range files {
		if got := sandboxtest.ReadFileOr(f); got != c {
			t.Errorf("%s changed on the host: %q", f, got)
		}
	}
}
