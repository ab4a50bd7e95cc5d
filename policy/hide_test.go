package policy

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSecretPathsMoved: the stores a variable moves are hidden where it says, the
// files a credential variable names too, and a kept agent's own login stays
// wherever its variable moves its directory.
func TestSecretPathsMoved(t *testing.T) {
	env := []string{"XDG_CONFIG_HOME=/h/xdg", "GNUPGHOME=/h/keys/gpg", "KUBECONFIG=/h/a:/h/b",
		"CLAUDE_CONFIG_DIR=/h/cc", "GOOGLE_APPLICATION_CREDENTIALS=relative.json"}
	got := secretPaths("/h", "", env, nil)
	for _, want := range []string{"/h/.config/gh", "/h/xdg/gh", "/h/keys/gpg", "/h/a", "/h/b", "/h/cc/.credentials.json"} {
		if !slices.Contains(got, want) {
			t.Errorf("%s not hidden: %v", want, got)
		}
	}
	if slices.Contains(got, "relative.json") {
		t.Errorf("a relative path is hidden: %v", got)
	}
	if got := secretPaths("/h", "", env, []string{"claude"}); slices.Contains(got, "/h/cc/.credentials.json") {
		t.Errorf("the kept agent's login is hidden: %v", got)
	}
}

// TestSecretPathsSSHCommand: a key an ssh command line in the environment names
// (GIT_SSH_COMMAND -i, -iPATH, -o IdentityFile=) is hidden wherever it is, and so
// are the stores COMPOSER_HOME and DOCKER_CERT_PATH move; a public key is not.
func TestSecretPathsSSHCommand(t *testing.T) {
	env := []string{"GIT_SSH_COMMAND=ssh -i ~/deploy/key -o IdentitiesOnly=yes -o 'IdentityFile=/k/two' -i/k/three -i /k/four.pub",
		"RSYNC_RSH=ssh -oIdentityFile=/k/rsync", "COMPOSER_HOME=/c", "DOCKER_CERT_PATH=/d"}
	got := secretPaths("/h", "", env, nil)
	for _, want := range []string{"/h/deploy/key", "/k/two", "/k/three", "/k/rsync", "/c/auth.json", "/d/key.pem", "/h/.docker/key.pem"} {
		if !slices.Contains(got, want) {
			t.Errorf("%s not hidden: %v", want, got)
		}
	}
	for _, not := range []string{"/k/four.pub", "yes", "IdentitiesOnly=yes"} {
		if slices.Contains(got, not) {
			t.Errorf("%s hidden: %v", not, got)
		}
	}
}

// TestSecretPathsSSHConfigForms: the keys ssh's config names are hidden in every
// form ssh reads: through an Include of an Include, a quoted path with a space, a
// token known only when ssh connects (%h: every file it may name), a ${VARIABLE},
// and a config an ssh command line names with -F; the config files themselves and
// the files no token matches stay.
func TestSecretPathsSSHConfigForms(t *testing.T) {
	home := t.TempDir()
	files := map[string]string{
		".ssh/config":         "Include conf.d/*\nIdentityFile \"~/My Keys/id_work\"\nHost *\n  IdentityFile ~/keys/%h_key\n  IdentityFile=${KEYDIR}/k1\n  IdentityFile %d/%r\n  IdentityFile ~/.ssh/%h\n",
		".ssh/conf.d/a":       "Include ~/.ssh/deeper\n",
		".ssh/deeper":         "IdentityFile ~/nested/key\n",
		"other.cfg":           "IdentityFile %d/fkeys/k\n",
		"My Keys/id_work":     "KEY",
		"keys/github.com_key": "KEY",
		"keys/gitlab.com_key": "KEY",
		"keys/notes.txt":      "NOT A KEY",
		"envkeys/k1":          "KEY",
		"nested/key":          "KEY",
		"fkeys/k":             "KEY",
	}
	writeHomeFiles(t, home, files)
	env := []string{"KEYDIR=" + filepath.Join(home, "envkeys"), "GIT_SSH_COMMAND=ssh -F ~/other.cfg"}
	got := secretPaths(home, "", env, nil)
	for _, want := range []string{"My Keys/id_work", "keys/github.com_key", "keys/gitlab.com_key", "envkeys/k1", "nested/key", "fkeys/k"} {
		if !slices.Contains(got, filepath.Join(home, want)) {
			t.Errorf("~/%s not hidden", want)
		}
	}
	for _, not := range []string{"keys/notes.txt", ".ssh/config", ".ssh/conf.d/a", ".ssh/deeper", "other.cfg"} {
		if slices.Contains(got, filepath.Join(home, not)) {
			t.Errorf("~/%s hidden", not)
		}
	}
}

// TestSecretPathsGitConfig: the credential files the operator's Git config names
// (a store's --file, http.cookieFile, a URL's http.sslKey), in an included file
// too, are hidden where they are; another helper's words are not.
func TestSecretPathsGitConfig(t *testing.T) {
	home := t.TempDir()
	files := map[string]string{
		".gitconfig":             "[credential]\n\thelper = store --file ~/secrets/git-store\n[include]\n\tpath = ~/dotfiles/git.inc\n",
		"dotfiles/git.inc":       "[http]\n\tcookiefile = ~/secrets/gerrit-cookies\n[http \"https://corp.example/\"]\n\tsslKey = /opt/corp/client.key\n[credential \"https://x.example\"]\n\thelper = /usr/lib/git-core/git-credential-store --file /opt/corp/store2\n\thelper = cache --timeout 300\n",
		"secrets/git-store":      "https://u:p@host\n",
		"secrets/gerrit-cookies": "cookie\n",
	}
	writeHomeFiles(t, home, files)
	got := secretPaths(home, "", []string{"GIT_CONFIG_NOSYSTEM=1"}, nil)
	for _, want := range []string{filepath.Join(home, "secrets/git-store"), filepath.Join(home, "secrets/gerrit-cookies"), "/opt/corp/client.key", "/opt/corp/store2"} {
		if !slices.Contains(got, want) {
			t.Errorf("%s not hidden", want)
		}
	}
	for _, not := range []string{"300", "cache", filepath.Join(home, "dotfiles/git.inc")} {
		if slices.Contains(got, not) {
			t.Errorf("%s hidden", not)
		}
	}
}

// TestSecretPathsClientKeys: the client keys a kubeconfig names (absolute, ~ and
// relative to it) and those GIT_SSL_KEY and PGSSLKEY name are hidden where they are,
// as is libpq's default client key.
func TestSecretPathsClientKeys(t *testing.T) {
	home := t.TempDir()
	kube := filepath.Join(home, "kc", "config")
	if err := os.MkdirAll(filepath.Dir(kube), 0o700); err != nil {
		t.Fatal(err)
	}
	data := "users:\n- name: admin\n  user:\n    client-certificate: /opt/certs/admin.crt\n    client-key: /opt/certs/admin.key\n" +
		"- name: dev\n  user:\n    client-key: \"~/certs/dev.key\"\n- name: sa\n  user:\n    tokenFile: sa-token # service account\n"
	if err := os.WriteFile(kube, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"KUBECONFIG=" + kube, "GIT_SSL_KEY=/opt/git/client.key", "PGSSLKEY=/opt/pg/client.key"}
	got := secretPaths(home, "", env, nil)
	for _, want := range []string{"/opt/certs/admin.key", filepath.Join(home, "certs/dev.key"), filepath.Join(home, "kc/sa-token"),
		"/opt/git/client.key", "/opt/pg/client.key", filepath.Join(home, ".postgresql/postgresql.key")} {
		if !slices.Contains(got, want) {
			t.Errorf("%s not hidden", want)
		}
	}
	if slices.Contains(got, "/opt/certs/admin.crt") {
		t.Errorf("a client certificate (public) is hidden")
	}
}

// TestSecretPathsConfigsNotRegular: the configs --hide-secrets reads for the keys
// they name (an ssh config's Include, a -F config of GIT_SSH_COMMAND, a kubeconfig
// KUBECONFIG names, which direnv often points into the repository the sandbox
// writes) may be a FIFO or a device: they are skipped, never read (an open of a FIFO
// for reading waits for a writer: the launch hung), and a regular file reached by a
// symlink is still read.
func TestSecretPathsConfigsNotRegular(t *testing.T) {
	home := t.TempDir()
	for _, d := range []string{".ssh", "repo", "dots", "keys"} {
		if err := os.MkdirAll(filepath.Join(home, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, fifo := range []string{"repo/kubeconfig", "repo/ssh.cfg", ".ssh/fifo.conf"} {
		if err := unix.Mkfifo(filepath.Join(home, fifo), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		".ssh/config":  "Include fifo.conf\nInclude /dev/zero\nInclude ~/.ssh/linked.conf\n",
		"dots/ssh.inc": "IdentityFile ~/keys/linked\n",
		"dots/kube":    "users:\n- user:\n    client-key: /opt/kube/linked.key\n",
		"keys/linked":  "KEY",
	}
	writeHomeFiles(t, home, files)
	if err := os.Symlink(filepath.Join(home, "dots/ssh.inc"), filepath.Join(home, ".ssh/linked.conf")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(home, "dots/kube"), filepath.Join(home, "repo/kube-link")); err != nil {
		t.Fatal(err)
	}
	env := []string{"GIT_CONFIG_NOSYSTEM=1", "GIT_SSH_COMMAND=ssh -F " + filepath.Join(home, "repo/ssh.cfg"),
		"KUBECONFIG=" + filepath.Join(home, "repo/kubeconfig") + ":" + filepath.Join(home, "repo/kube-link")}
	done := make(chan []string, 1)
	go func() { done <- secretPaths(home, "", env, nil) }()
	var got []string
	select {
	case got = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("secretPaths hangs on a FIFO named as a config (20 s)")
	}
	for _, want := range []string{filepath.Join(home, "keys/linked"), "/opt/kube/linked.key"} {
		if !slices.Contains(got, want) {
			t.Errorf("%s (named by a config reached through a symlink) not hidden", want)
		}
	}
}

// TestSecretPathsTokenSkipsSockets: a token's pattern (IdentityFile ~/.ssh/%h)
// matches a ControlMaster socket beside the keys; ssh opens a key as a regular file,
// and a socket cannot be hidden (secretSSH leaves it too): the launch was refused
// ("is neither a directory nor a regular file").
func TestSecretPathsTokenSkipsSockets(t *testing.T) {
	home := t.TempDir()
	ssh := filepath.Join(home, ".ssh")
	if err := os.MkdirAll(ssh, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ssh, "config"), []byte("Host *\n  IdentityFile ~/.ssh/%h\n  ControlPath ~/.ssh/%r@%h\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ssh, "github.com"), []byte("KEY"), 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(ssh, "git@github.com")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got := secretPaths(home, "", []string{"GIT_CONFIG_NOSYSTEM=1"}, nil)
	if !slices.Contains(got, filepath.Join(ssh, "github.com")) {
		t.Errorf("~/.ssh/github.com not hidden")
	}
	if slices.Contains(got, sock) {
		t.Errorf("the ControlMaster socket %s is a secret to hide: the launch is refused", sock)
	}
}

// TestSecretPathsKubeconfigJSON: a kubeconfig in JSON, pretty-printed or on one
// line, names its client keys with quoted members; they were read as no key.
func TestSecretPathsKubeconfigJSON(t *testing.T) {
	home := t.TempDir()
	pretty := filepath.Join(home, "pretty.json")
	oneLine := filepath.Join(home, "one.json")
	data := map[string]string{
		pretty:  "{\n  \"users\": [\n    {\n      \"name\": \"admin\",\n      \"user\": {\n        \"client-certificate\": \"/opt/k/admin.crt\",\n        \"client-key\": \"/opt/k/admin.key\"\n      }\n    }\n  ]\n}\n",
		oneLine: `{"users":[{"name":"sa","user":{"tokenFile":"sa-token"}},{"name":"dev","user":{"client-key":"/opt/k/dev.key","client-certificate":"/opt/k/dev.crt"}}]}`,
	}
	for p, d := range data {
		if err := os.WriteFile(p, []byte(d), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	got := secretPaths(home, "", []string{"GIT_CONFIG_NOSYSTEM=1", "KUBECONFIG=" + pretty + ":" + oneLine}, nil)
	for _, want := range []string{"/opt/k/admin.key", "/opt/k/dev.key", filepath.Join(home, "sa-token")} {
		if !slices.Contains(got, want) {
			t.Errorf("%s not hidden", want)
		}
	}
	for _, not := range []string{"/opt/k/admin.crt", "/opt/k/dev.crt"} {
		if slices.Contains(got, not) {
			t.Errorf("%s (a certificate) hidden", not)
		}
	}
}

// writeHomeFiles writes files (a path below home to its content) with their
// directories, as the owner's only.
func writeHomeFiles(t *testing.T, home string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(home, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// TestHideSecretsNotHideableSaysWhatToDo: a FIFO at a repository-local KUBECONFIG
// (direnv points it into the repository) is refused, and the one line names the
// variable and what to change; a FIFO given to --hide says to hide its directory.
// The line used to end at "is neither a directory nor a regular file".
func TestHideSecretsNotHideableSaysWhatToDo(t *testing.T) {
	home, repo := tree(t)
	fifo := filepath.Join(repo, "kubeconfig")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := New(Options{Cwd: repo, Repo: repo, Home: home, HideSecrets: true,
		Environ: []string{"GIT_CONFIG_NOSYSTEM=1", "KUBECONFIG=/nowhere/a:" + fifo}})
	if err == nil || strings.Contains(err.Error(), "\n") {
		t.Fatalf("a FIFO at KUBECONFIG: %v, want a one-line refusal", err)
	}
	for _, want := range []string{"--hide-secrets", fifo, "a FIFO", "$KUBECONFIG names it", "point KUBECONFIG at a regular file", "without --hide-secrets"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	_, err = New(Options{Cwd: repo, Repo: repo, Home: home, Hide: []string{fifo}})
	if err == nil || !strings.Contains(err.Error(), "a FIFO") || !strings.Contains(err.Error(), "hide the directory that holds it instead") {
		t.Errorf("--hide of a FIFO: %v, want what to do", err)
	}
}

// TestSecretPathsToolLogins: the credential files of curl, wget, pip, ngrok, the
// Stripe and Sentry CLIs and the other CLIs the list had missed are hidden at
// their default places and where their variables (CURL_HOME, PIP_CONFIG_FILE,
// XDG_CONFIG_HOME) move them.
func TestSecretPathsToolLogins(t *testing.T) {
	env := []string{"XDG_CONFIG_HOME=/h/xdg", "CURL_HOME=/c", "PIP_CONFIG_FILE=/p/pip.ini", "WGETRC=/w/rc", "KAGGLE_CONFIG_DIR=/k"}
	got := secretPaths("/h", "", env, nil)
	for _, want := range []string{"/h/.curlrc", "/h/.config/curlrc", "/h/xdg/.curlrc", "/c/.curlrc", "/c/.config/curlrc",
		"/h/.wgetrc", "/w/rc", "/h/.pip/pip.conf", "/h/.config/pip/pip.conf", "/h/xdg/pip/pip.conf", "/p/pip.ini",
		"/h/.config/ngrok/ngrok.yml", "/h/.ngrok2", "/h/.config/stripe/config.toml", "/h/.sentryclirc",
		"/h/.mc/config.json", "/h/.config/linode-cli", "/h/.cloudflared", "/h/.kaggle/kaggle.json", "/k/kaggle.json",
		"/h/.circleci/cli.yml", "/h/.docker/contexts/tls"} {
		if !slices.Contains(got, want) {
			t.Errorf("%s not hidden", want)
		}
	}
}

// TestHideSecretsGitConfigCredentials: a Git config of the operator's that holds a
// credential itself — a token in url.<base>.insteadOf's URL, an Authorization
// extraHeader, sendemail.smtpPass in an included file — is hidden whole under
// --hide-secrets (the sandbox's HOME shows it as it is), with one line at launch
// that names the line and key and never the value; a config without one stays.
func TestHideSecretsGitConfigCredentials(t *testing.T) {
	home, repo := tree(t)
	token := "ghp_" + strings.Repeat("T", 36)
	writeHomeFiles(t, home, map[string]string{
		".gitconfig": "[user]\n\tname = U\n[include]\n\tpath = ~/.gitconfig.d/mail\n\tpath = ~/.gitconfig.d/plain\n" +
			"[url \"https://x-access-token:" + token + "@github.com/\"]\n\tinsteadOf = https://github.com/\n",
		".gitconfig.d/mail":  "[sendemail]\n\tsmtpServer = smtp.example.com\n\tsmtpPass = hunter2\n",
		".gitconfig.d/plain": "[core]\n\tpager = less -R\n[url \"git@github.com:\"]\n\tinsteadOf = gh:\n",
		".config/git/config": "[http \"https://corp.example/\"]\n\textraHeader = Authorization: Bearer abc\n",
	})
	p, err := New(Options{Cwd: repo, Repo: repo, Home: home, HideSecrets: true, Environ: []string{"GIT_CONFIG_NOSYSTEM=1"}})
	if err != nil {
		t.Fatal(err)
	}
	hidden := func(rel string) bool {
		return slices.ContainsFunc(p.Hide, func(h Hidden) bool { return h.Path == filepath.Join(home, rel) })
	}
	for _, rel := range []string{".gitconfig", ".gitconfig.d/mail", ".config/git/config"} {
		if !hidden(rel) {
			t.Errorf("%s holds a credential and is not hidden", rel)
		}
	}
	if hidden(".gitconfig.d/plain") {
		t.Errorf(".gitconfig.d/plain holds no credential and is hidden")
	}
	notes := strings.Join(p.HideNotices(), "\n") + "\n"
	for _, want := range []string{filepath.Join(home, ".gitconfig") + " is empty inside: line 7 (url.<…>.insteadof) holds a credential; to keep its other settings inside",
		"mail is empty inside: line 3 (sendemail.smtppass) holds a credential\n", "line 2 (http.<…>.extraheader)"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notices do not say %q:\n%s", want, notes)
		}
	}
	if strings.Contains(notes, token) || strings.Contains(notes, "hunter2") || strings.Contains(notes, "abc") {
		t.Errorf("notices show a credential:\n%s", notes)
	}
	if len(p.HideNotices()) != 3 {
		t.Errorf("want one notice per file, got:\n%s", notes)
	}
}

// TestSecretPathsMoreStores: the stores the list had missed — OpenStack, Teleport,
// gsutil, pnpm's and Bun's global configs, uv's, sbt's, Dart's and Hex's logins,
// other agents' key stores, Ollama's key, signing keys and wallets — are hidden,
// the XDG ones where XDG_CONFIG_HOME and XDG_DATA_HOME move them.
func TestSecretPathsMoreStores(t *testing.T) {
	env := []string{"XDG_CONFIG_HOME=/h/xdg", "XDG_DATA_HOME=/h/data"}
	got := secretPaths("/h", "", env, nil)
	for _, want := range []string{"/h/.config/openstack", "/h/xdg/openstack", "/h/.tsh", "/h/.gsutil",
		"/h/.config/pnpm/rc", "/h/xdg/pnpm/rc", "/h/.bunfig.toml", "/h/xdg/.bunfig.toml", "/h/.local/share/uv/credentials",
		"/h/data/uv/credentials", "/h/.sbt/.credentials", "/h/.config/dart/pub-credentials.json", "/h/.pub-cache/credentials.json",
		"/h/.hex/hex.config", "/h/.local/share/opencode/auth.json", "/h/data/opencode/auth.json", "/h/.qwen/oauth_creds.json",
		"/h/.config/goose/secrets.yaml", "/h/.ollama/id_ed25519", "/h/.config/Bitwarden CLI", "/h/.minisign/minisign.key",
		"/h/.config/solana/id.json", "/h/.ethereum/keystore", "/h/.electrum/wallets", "/h/.bitcoin/wallet.dat", "/h/.vnc/passwd"} {
		if !slices.Contains(got, want) {
			t.Errorf("%s not hidden", want)
		}
	}
}
