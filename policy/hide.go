package policy

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agentbox/agentbox/internal/hostpath"
	"github.com/agentbox/agentbox/internal/safepath"
)

// Hidden is one path that is empty inside the sandbox (--hide, --hide-secrets): an
// empty read-only directory or file is bound over it.
type Hidden struct {
	Path string // canonical
	Dir  bool
	From string // "--hide" or "--hide-secrets"
	// Why: what --hide-secrets found in a file that is no store of its own (a Git
	// config holding a credential), for the line shown at launch; "" for a store.
	Why string
	// Discard: a history file (Histories), which shells and REPLs inside write at
	// every exit: /dev/null stands in for it (empty, writes dropped), as an empty
	// read-only file made zsh print an error at each exit.
	Discard bool
}

// Histories are the shell and REPL histories --hide-secrets hides when they exist
// as regular files below HOME (and $HISTFILE wherever it is): they hold what was
// typed, passwords and tokens given on a command line or at a prompt included.
var Histories = []string{
	".bash_history", ".zsh_history", ".zhistory", ".histfile", ".sh_history", ".history",
	".local/share/fish/fish_history", ".python_history", ".psql_history",
	".mysql_history", ".mariadb_history", ".node_repl_history", ".sqlite_history",
	".rediscli_history", ".irb_history", ".ts_node_repl_history", ".local/state/python_history",
}

// historyPaths are Histories below home, and $HISTFILE of environ when absolute.
func historyPaths(home string, environ []string) []string {
	var out []string
	for _, h := range Histories {
		out = append(out, filepath.Join(home, h))
	}
	if f := environGetter(environ)("HISTFILE"); filepath.IsAbs(f) {
		out = append(out, filepath.Clean(f))
	}
	return out
}

// Secrets are the well-known credential stores below HOME that --hide-secrets hides
// when they exist: keys, tokens and password stores of the common tools, and the
// browsers' profiles (cookies, saved passwords). ~/.ssh is handled apart: only its
// private keys are hidden (secretSSH). The agents' own credentials are in the list
// too, and stay readable when their preset is kept.
var Secrets = []string{
	".gnupg", ".password-store", ".local/share/keyrings", ".local/share/kwalletd",
	".aws", ".config/gcloud", ".azure", ".kube", ".oci", ".docker/config.json",
	".config/containers/auth.json", ".netrc", ".git-credentials", ".config/git/credentials",
	".config/gh", ".config/hub", ".config/glab-cli", ".config/github-copilot",
	".npmrc", ".yarnrc.yml", ".pypirc", ".gem/credentials", ".cargo/credentials",
	".cargo/credentials.toml", ".terraform.d/credentials.tfrc.json", ".vault-token",
	".config/op", ".config/rclone/rclone.conf", ".s3cfg", ".boto", ".pgpass", ".my.cnf",
	".mozilla", ".thunderbird", ".config/google-chrome", ".config/chromium",
	".config/BraveSoftware", ".config/microsoft-edge", ".config/vivaldi",
	".claude/.credentials.json", ".codex/auth.json", ".docker/key.pem", ".pulumi/credentials.json",
	// Build tools' and package registries' logins.
	".m2/settings.xml", ".m2/settings-security.xml", ".gradle/gradle.properties",
	".ivy2/.credentials", ".nuget/NuGet/NuGet.Config", ".config/NuGet/NuGet.Config",
	".composer/auth.json", ".config/composer/auth.json", ".bundle/config",
	".local/share/gem/credentials", ".yarnrc", ".config/pypoetry/auth.toml",
	".local/share/python_keyring", ".terraformrc", ".config/helm/repositories.yaml",
	// Forges, clouds and services: tokens and client keys.
	".gitcookies", ".subversion/auth", ".config/tea", ".config/doctl", ".config/hcloud",
	".fly", ".config/netlify", ".config/configstore", ".local/share/com.vercel.cli",
	".wrangler", ".config/.wrangler", ".minikube", ".talos", ".databrickscfg",
	".dbt/profiles.yml", ".snowflake", ".cache/huggingface/token", ".huggingface/token",
	".gemini/oauth_creds.json", ".mylogin.cnf", ".postgresql/postgresql.key",
	// Private keys of encryption tools, and NSS's client certificates.
	".config/sops/age", ".config/borg/keys", ".local/share/atuin/key", ".pki/nssdb",
	// Browser profiles from snap and Flatpak, and desktop apps that are browsers
	// (their cookies are sessions).
	".config/opera", ".librewolf", "snap/firefox/common/.mozilla", "snap/chromium/common/chromium",
	"snap/thunderbird/common/.thunderbird", ".var/app/org.mozilla.firefox",
	".var/app/org.mozilla.Thunderbird", ".var/app/com.google.Chrome",
	".var/app/org.chromium.Chromium", ".var/app/com.brave.Browser", ".var/app/com.microsoft.Edge",
	".config/Slack", ".config/discord", ".config/Signal", ".local/share/TelegramDesktop",
	// Files that hand a tool its login with its options or its index URL: curl's
	// and wget's (-u user:pass, -H 'Authorization: …', http_password=), pip's
	// (index-url with credentials); curl reads $XDG_CONFIG_HOME/.curlrc, and
	// ~/.config/curlrc when that is unset.
	".curlrc", ".config/curlrc", ".config/.curlrc", ".wgetrc", ".pip/pip.conf", ".config/pip/pip.conf",
	// Tunnels, payment and error-tracking CLIs, clouds and CI services: tokens.
	".config/ngrok/ngrok.yml", ".ngrok2", ".config/stripe/config.toml", ".sentryclirc",
	".mc/config.json", ".config/linode-cli", ".config/scw/config.yaml", ".vultr-cli.yaml",
	".config/fastly/config.toml", ".cloudflared", ".railway/config.json", ".supabase/access-token",
	".circleci/cli.yml", ".travis/config.yml", ".jfrog", ".bluemix", ".aliyun", ".doppler",
	".kaggle/kaggle.json", ".config/kaggle/kaggle.json", ".docker/contexts/tls",
	// Clouds' and access proxies' logins (OpenStack's clouds.yaml and secure.yaml
	// hold passwords; Teleport's client keys and certificates; gsutil's token
	// cache), registries' (pnpm's and Bun's global configs hold _authToken, uv's
	// `uv auth` store, sbt's, Dart's and Hex's), other agents' stores of model
	// providers' keys (opencode, Qwen Code, Amp, Goose) and Ollama's signing key.
	".config/openstack", ".tsh", ".gsutil", ".config/exoscale", ".config/Bitwarden CLI",
	".config/pnpm/rc", ".bunfig.toml", ".config/.bunfig.toml", ".local/share/uv/credentials",
	".sbt/.credentials", ".config/dart/pub-credentials.json", ".pub-cache/credentials.json", ".hex/hex.config",
	".local/share/opencode/auth.json", ".qwen/oauth_creds.json", ".local/share/amp/secrets.json",
	".config/goose/secrets.yaml", ".ollama/id_ed25519",
	// Private keys that sign or spend: minisign's, wallets (Solana's keypair,
	// Ethereum's keystore, Electrum's and Bitcoin Core's wallets), VNC's password.
	".minisign/minisign.key", ".config/solana/id.json", ".ethereum/keystore", ".electrum/wallets",
	".bitcoin/wallets", ".bitcoin/wallet.dat", ".vnc/passwd",
}

// SecretEnvPaths are the variables that move a store of Secrets, or name a
// credential file themselves: the user's tools read the store where the variable
// says, so --hide-secrets hides what it names there (Files below it, or the whole
// path when Files is empty). A list (KUBECONFIG) is split at ':'. Dropping
// GOOGLE_APPLICATION_CREDENTIALS from the environment leaves its file readable:
// it is hidden here too. $XDG_CONFIG_HOME and $XDG_DATA_HOME move every member of
// Secrets below .config and .local/share (secretPaths).
var SecretEnvPaths = []struct {
	Var   string
	Files []string
	Agent string // the preset whose own login this is: not hidden when it is kept
}{
	{"GNUPGHOME", nil, ""}, {"PASSWORD_STORE_DIR", nil, ""}, {"CLOUDSDK_CONFIG", nil, ""},
	{"AZURE_CONFIG_DIR", nil, ""}, {"GH_CONFIG_DIR", nil, ""}, {"AWS_SHARED_CREDENTIALS_FILE", nil, ""},
	{"AWS_CONFIG_FILE", nil, ""}, {"GOOGLE_APPLICATION_CREDENTIALS", nil, ""}, {"KUBECONFIG", nil, ""},
	{"NPM_CONFIG_USERCONFIG", nil, ""}, {"npm_config_userconfig", nil, ""}, {"NETRC", nil, ""},
	{"PGPASSFILE", nil, ""}, {"MYSQL_TEST_LOGIN_FILE", nil, ""}, {"RCLONE_CONFIG", nil, ""},
	{"S3CMD_CONFIG", nil, ""}, {"BOTO_CONFIG", nil, ""}, {"TF_CLI_CONFIG_FILE", nil, ""},
	{"REGISTRY_AUTH_FILE", nil, ""}, {"SOPS_AGE_KEY_FILE", nil, ""}, {"OCI_CLI_CONFIG_FILE", nil, ""},
	{"HF_TOKEN_PATH", nil, ""}, {"VAULT_CONFIG_PATH", nil, ""}, {"BORG_KEYS_DIR", nil, ""},
	{"DOCKER_CONFIG", []string{"config.json"}, ""}, {"CARGO_HOME", []string{"credentials", "credentials.toml"}, ""},
	{"GEM_HOME", []string{"credentials"}, ""}, {"HF_HOME", []string{"token"}, ""},
	{"CLAUDE_CONFIG_DIR", []string{".credentials.json"}, "claude"}, {"CODEX_HOME", []string{"auth.json"}, "codex"},
	{"GRADLE_USER_HOME", []string{"gradle.properties"}, ""},
	{"COMPOSER_HOME", []string{"auth.json"}, ""}, {"POETRY_CONFIG_DIR", []string{"auth.toml"}, ""},
	{"PULUMI_HOME", []string{"credentials.json"}, ""}, {"BUNDLE_USER_CONFIG", nil, ""},
	{"ANSIBLE_VAULT_PASSWORD_FILE", nil, ""}, {"GLAB_CONFIG_DIR", nil, ""},
	{"DOCKER_CERT_PATH", []string{"key.pem"}, ""},
	{"CURL_HOME", []string{".curlrc", ".config/curlrc"}, ""}, {"WGETRC", nil, ""}, {"PIP_CONFIG_FILE", nil, ""},
	{"SCW_CONFIG_PATH", nil, ""}, {"KAGGLE_CONFIG_DIR", []string{"kaggle.json"}, ""},
	// Client keys: Git's (GIT_SSL_KEY is http.sslKey), libpq's, a Kerberos client
	// keytab.
	{"GIT_SSL_KEY", nil, ""}, {"PGSSLKEY", nil, ""}, {"KRB5_CLIENT_KTNAME", nil, ""},
}

// SSHCommandEnv are the variables that hold an ssh command line, whose -i and
// -o IdentityFile= name a private key anywhere (GIT_SSH_COMMAND="ssh -i ~/deploy/key").
var SSHCommandEnv = []string{"GIT_SSH_COMMAND", "RSYNC_RSH", "BORG_RSH"}

// sshCommandKeys are the absolute paths (or ~/ ones, below home) an ssh command
// line names as identity files, and the config files it names with -F (whose
// IdentityFile lines sshIdentities follows). Quoting is not parsed: a quoted path
// is stripped of its quotes, one with spaces is missed.
func sshCommandKeys(cmdline, home string) (keys, configs []string) {
	words := strings.Fields(cmdline)
	for i := 0; i < len(words); i++ {
		w, path := words[i], ""
		switch {
		case w == "-F" && i+1 < len(words) || strings.HasPrefix(w, "-F") && len(w) > 2:
			c := strings.TrimPrefix(w, "-F")
			if c == "" {
				i++
				c = words[i]
			}
			c = strings.Trim(c, "\"'")
			if rest, ok := strings.CutPrefix(c, "~/"); ok {
				c = filepath.Join(home, rest)
			}
			if filepath.IsAbs(c) {
				configs = append(configs, filepath.Clean(c))
			}
			continue
		case w == "-i" && i+1 < len(words):
			i++
			path = words[i]
		case strings.HasPrefix(w, "-i"):
			path = w[2:]
		case w == "-o" && i+1 < len(words):
			i++
			path = identityOption(words[i])
		case strings.HasPrefix(w, "-o"):
			path = identityOption(w[2:])
		}
		path = strings.Trim(path, "\"'")
		if rest, ok := strings.CutPrefix(path, "~/"); ok {
			path = filepath.Join(home, rest)
		}
		if filepath.IsAbs(path) && !strings.HasSuffix(path, ".pub") {
			keys = append(keys, filepath.Clean(path))
		}
	}
	return keys, configs
}

// identityOption is the path of an ssh -o IdentityFile=PATH option, "" for another.
func identityOption(opt string) string {
	k, v, ok := strings.Cut(strings.Trim(opt, "\"'"), "=")
	if !ok || !strings.EqualFold(k, "IdentityFile") {
		return ""
	}
	return v
}

// resolveHide validates --hide and expands --hide-secrets. A hidden path must exist
// (a secret that does not is skipped), is resolved through symlinks (what is hidden
// is the content), and may neither be nor contain the repository or a kept path,
// nor lie where the sandbox has its own mounts.
func resolveHide(p *Policy, opts Options, cwd string) error {
	for _, arg := range opts.Hide {
		path := arg
		if strings.HasPrefix(path, "~/") && p.Home != "" {
			path = filepath.Join(p.Home, path[2:])
		} else if !filepath.IsAbs(path) {
			path = filepath.Join(cwd, path)
		}
		h, err := checkHide(p, arg, path, "--hide")
		if err != nil {
			return err
		}
		p.Hide = appendHidden(p.Hide, h)
	}
	if !opts.HideSecrets {
		return nil
	}
	p.GitConfigCopies = true
	if p.Home == "" {
		return &Error{What: "--hide-secrets", Reason: "there is no HOME to hide secrets in ($HOME is unset, / or missing)"}
	}
	why := map[string]string{}
	for _, g := range gitConfigCredentials(p.Home, environGetter(opts.Environ)) {
		why[g.path] = g.why
	}
	for _, path := range secretPaths(p.Home, opts.XDGConfigHome, opts.Environ, p.KeepAgents) {
		if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if p.inKept(path) {
			continue // the agent's own credentials, kept by its preset or --keep
		}
		h, err := checkHide(p, path, path, "--hide-secrets")
		h.Why = why[path]
		if err != nil {
			var pe *Error
			if errors.As(err, &pe) && (pe.Reason == "does not exist" || privateDir(pe.Reason)) {
				continue // a dangling symlink: nothing to read; or a store the sandbox has its own of
			}
			if errors.As(err, &pe) && strings.HasPrefix(pe.Reason, notHideable) {
				pe.Reason += secretRemedy(path, opts.Environ)
			}
			return err
		}
		p.Hide = appendHidden(p.Hide, h)
	}
	for _, path := range historyPaths(p.Home, opts.Environ) {
		if fi, err := os.Lstat(path); err != nil || !fi.Mode().IsRegular() || p.inKept(path) {
			continue // a link or another kind is left as it is: no history of the shells'
		}
		h, err := checkHide(p, path, path, "--hide-secrets")
		if err != nil {
			continue // in the repository, a kept path, agentbox's own: not hidden there
		}
		h.Discard = true
		p.Hide = appendHidden(p.Hide, h)
	}
	return nil
}

// secretPaths are the paths --hide-secrets hides when they exist: Secrets below
// HOME and below the XDG directories the environment sets, what SecretEnvPaths name,
// and the SSH private keys (~/.ssh's, those its config names, and those an ssh
// command line of SSHCommandEnv names).
func secretPaths(home, xdgConfig string, environ, keptAgents []string) []string {
	env := environGetter(environ)
	if xdgConfig == "" {
		xdgConfig = env("XDG_CONFIG_HOME")
	}
	moved := map[string]string{".config/": xdgConfig, ".local/share/": env("XDG_DATA_HOME")}
	var list []string
	for _, rel := range Secrets {
		list = append(list, filepath.Join(home, rel))
		for prefix, dir := range moved {
			if rest, ok := strings.CutPrefix(rel, prefix); ok && filepath.IsAbs(dir) {
				list = append(list, filepath.Join(dir, rest))
			}
		}
	}
	for _, m := range SecretEnvPaths {
		if m.Agent != "" && slices.Contains(keptAgents, m.Agent) {
			continue // the kept agent's own login, wherever its variable moves it
		}
		for _, v := range filepath.SplitList(env(m.Var)) {
			if !filepath.IsAbs(v) {
				continue // nothing a tool finds from an unknown working directory
			}
			if len(m.Files) == 0 {
				list = append(list, v)
			}
			for _, f := range m.Files {
				list = append(list, filepath.Join(v, f))
			}
		}
	}
	var sshConfigs []string
	for _, v := range SSHCommandEnv {
		keys, configs := sshCommandKeys(env(v), home)
		list = append(list, keys...)
		sshConfigs = append(sshConfigs, configs...)
	}
	list = append(list, gitCredentialFiles(home, env)...)
	for _, g := range gitConfigCredentials(home, env) {
		list = append(list, g.path)
	}
	list = append(list, kubeKeyFiles(home, env("KUBECONFIG"))...)
	keys, configs := sshIdentities(home, env, sshConfigs)
	for _, k := range secretSSH(filepath.Join(home, ".ssh"), 0) {
		if !slices.Contains(configs, k) {
			list = append(list, k) // the config files ~/.ssh/config includes stay
		}
	}
	return append(list, keys...)
}

// kubeKeyFiles are the client keys and token files the kubeconfigs name
// (client-key, tokenFile): a kubeconfig below ~/.kube is hidden whole, but the key
// it points at may be anywhere (~/certs/admin.key). Read line by line (no YAML
// parser here), a JSON one member by member: a key's value, unquoted, relative to
// its kubeconfig's directory.
func kubeKeyFiles(home, kubeconfig string) []string {
	configs := filepath.SplitList(kubeconfig)
	if len(configs) == 0 {
		configs = []string{filepath.Join(home, ".kube", "config")}
	}
	var out []string
	for _, c := range configs {
		if !filepath.IsAbs(c) {
			continue
		}
		data, err := readConfig(c)
		if err != nil {
			continue
		}
		lines := strings.Split(string(data), "\n")
		if json := strings.TrimSpace(string(data)); strings.HasPrefix(json, "{") {
			// A JSON kubeconfig (kubectl reads one; -o json writes one), minified too:
			// a member per piece.
			lines = strings.FieldsFunc(json, func(r rune) bool { return r == '\n' || r == ',' || r == '{' || r == '}' })
		}
		for _, line := range lines {
			k, v, ok := strings.Cut(strings.TrimLeft(strings.TrimSpace(line), "- "), ":")
			if k = strings.Trim(strings.TrimSpace(k), `"'`); !ok || k != "client-key" && k != "tokenFile" && k != "token-file" {
				continue
			}
			v, _, _ = strings.Cut(strings.TrimSpace(v), " #")
			v = strings.Trim(strings.TrimSpace(v), `"'`)
			if rest, ok := strings.CutPrefix(v, "~/"); ok {
				v = filepath.Join(home, rest)
			}
			if v == "" {
				continue
			}
			if !filepath.IsAbs(v) {
				v = filepath.Join(filepath.Dir(c), v)
			}
			out = append(out, filepath.Clean(v))
		}
	}
	return out
}

// maxSSHConfig bounds what is read of ~/.ssh/config and the files it includes.
const maxSSHConfig = 1 << 20

// readConfig reads up to maxSSHConfig bytes of a config the keys are looked up in
// when it is a regular file, through symlinks (a kubeconfig or an ssh include is
// often a link into a dotfiles checkout). It never blocks: KUBECONFIG may name a
// file of the repository the sandbox writes, and an open of a FIFO for reading
// waits for a writer; a device (Include /dev/zero) is no config either, and is not
// even opened (a watchdog is armed by its open).
func readConfig(path string) ([]byte, error) {
	f, err := safepath.OpenRegularFollow(path)
	if errors.Is(err, safepath.ErrNotRegular) {
		return nil, errors.New(path + ": not a regular file")
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, maxSSHConfig))
}

// sshIdentities are the private keys named with IdentityFile by ~/.ssh/config, by
// the configs an ssh command line of SSHCommandEnv names with -F, and by the files
// those include (Include, to any depth, up to maxSSHConfigFiles files), wherever the
// keys are (~/keys/work); and the config files it read. A name is expanded as ssh
// does (ssh_config(5) TOKENS, ENVIRONMENT VARIABLES): ~ and %d are HOME, ${NAME}
// the launcher's variable, %% a percent sign, and a token known only when ssh
// connects (%h, %r, %C …) is taken for any name, so that every key it may name is
// hidden (~/keys/%h matches ~/keys/github.com). A public key named to pick an
// agent's key is skipped.
func sshIdentities(home string, env func(string) string, extra []string) (keys, configs []string) {
	files := append([]string{filepath.Join(home, ".ssh", "config")}, extra...)
	for i := 0; i < len(files) && i < maxSSHConfigFiles; i++ {
		data, err := readConfig(files[i])
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			key, val := sshConfigLine(line)
			if key != "identityfile" && key != "include" {
				continue
			}
			for _, arg := range sshArgs(val) {
				pattern, ok := sshPathPattern(arg, home, env, key == "include")
				if !ok {
					continue
				}
				matches, _ := filepath.Glob(pattern)
				for _, m := range matches {
					switch {
					case key == "include" && !slices.Contains(files, m):
						files = append(files, m)
					case key == "identityfile" && !strings.HasSuffix(m, ".pub"):
						keys = append(keys, m)
					}
				}
			}
		}
	}
	// A token's pattern matches more than keys (%d/%r matches HOME's directories,
	// ~/.ssh/%h the config files and ControlMaster sockets): ssh opens a key as a
	// regular file, and a config is read.
	named := keys[:0]
	for _, k := range keys {
		if st, err := os.Stat(k); (err != nil || st.Mode().IsRegular()) && !slices.Contains(files, k) {
			named = append(named, k)
		}
	}
	return named, files
}

// maxSSHConfigFiles bounds the config files sshIdentities reads (ssh itself stops
// at 16 levels of Include).
const maxSSHConfigFiles = 64

// sshPathPattern is arg, a path of an IdentityFile or Include line, as a pattern of
// filepath.Glob that matches every file ssh may open for it; false for a path
// nothing here can name (an unset variable, "none"). An Include's own wildcards
// stay wildcards; an IdentityFile's are literal. A relative path is taken below
// ~/.ssh, where ssh looks for an Include's (and, for an IdentityFile, where a user
// who writes one means it).
func sshPathPattern(arg, home string, env func(string) string, globs bool) (string, bool) {
	if arg == "" || strings.EqualFold(arg, "none") {
		return "", false
	}
	if arg == "~" || strings.HasPrefix(arg, "~/") {
		arg = "%d" + arg[1:]
	}
	literal := func(s string) string {
		if globs {
			return s
		}
		return escapeGlob(s)
	}
	var b strings.Builder
	for i := 0; i < len(arg); i++ {
		c := arg[i]
		switch {
		case c == '%' && i+1 < len(arg):
			i++
			switch arg[i] {
			case '%':
				b.WriteString(literal("%"))
			case 'd':
				b.WriteString(literal(home))
			default:
				b.WriteString("*") // known when ssh connects: any name
			}
		case c == '$' && i+1 < len(arg) && arg[i+1] == '{':
			name, _, ok := strings.Cut(arg[i+2:], "}")
			v := env(name)
			if !ok || v == "" {
				return "", false // ssh refuses the line too
			}
			b.WriteString(literal(v))
			i += 2 + len(name)
		default:
			b.WriteString(literal(string(c)))
		}
	}
	p := b.String()
	if !filepath.IsAbs(p) {
		p = filepath.Join(escapeGlob(home), ".ssh", p)
	}
	return p, true
}

// escapeGlob makes a literal name a pattern of filepath.Glob that matches it alone.
func escapeGlob(s string) string {
	if !strings.ContainsAny(s, `\*?[`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(`\*?[`, s[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// sshArgs splits the arguments of an ssh_config(5) line as ssh does: at white
// space outside double or single quotes, a backslash escaping a quote, a backslash
// or a space.
func sshArgs(s string) []string {
	var args []string
	var cur strings.Builder
	in, quote := false, byte(0)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s) && strings.IndexByte(`\"' `, s[i+1]) >= 0:
			i++
			cur.WriteByte(s[i])
			in = true
		case quote != 0 && c == quote:
			quote = 0
		case quote == 0 && (c == '"' || c == '\''):
			quote, in = c, true
		case quote == 0 && (c == ' ' || c == '\t'):
			if in {
				args = append(args, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if in {
		args = append(args, cur.String())
	}
	return args
}

// sshConfigLine splits a line of ssh_config(5) into its keyword (lower case) and
// arguments: "Keyword args", "Keyword=args", "Keyword = args".
func sshConfigLine(line string) (string, string) {
	line = strings.TrimSpace(line)
	if line == "" || line[0] == '#' {
		return "", ""
	}
	i := strings.IndexAny(line, " \t=")
	if i < 0 {
		return strings.ToLower(line), ""
	}
	rest := strings.TrimLeft(line[i:], " \t")
	rest = strings.TrimPrefix(rest, "=")
	return strings.ToLower(line[:i]), strings.TrimSpace(rest)
}

// maxSSHDepth bounds the walk of ~/.ssh for keys kept in subdirectories.
const maxSSHDepth = 4

// secretSSH lists the private keys in dir and its subdirectories: every regular
// file but the public keys, known_hosts, authorized_keys and config — a key's name
// is the user's choice, so what is not known to be public is hidden.
func secretSSH(dir string, depth int) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		n := e.Name()
		switch {
		case e.IsDir() && depth < maxSSHDepth:
			out = append(out, secretSSH(filepath.Join(dir, n), depth+1)...)
		case e.IsDir():
			out = append(out, filepath.Join(dir, n)) // too deep to look into: hidden whole
		case strings.HasSuffix(n, ".pub") || strings.HasPrefix(n, "known_hosts") ||
			strings.HasPrefix(n, "authorized_keys") || n == "config":
		case e.Type()&(fs.ModeSocket|fs.ModeNamedPipe|fs.ModeDevice|fs.ModeCharDevice) != 0:
			// A ControlMaster socket: in HOME's lower layer it refuses connections
			// inside (docs/security.md, Host sockets), and it cannot be hidden.
		default:
			out = append(out, filepath.Join(dir, n))
		}
	}
	return out
}

// privateDir says whether checkHide refused a path for lying in /tmp or /run,
// which the sandbox has its own of: a store a variable moved there is out of reach.
func privateDir(reason string) bool {
	return reason == "lies in /tmp, which the sandbox has its own of" ||
		reason == "lies in /run, which the sandbox has its own of"
}

func (p *Policy) inKept(path string) bool {
	for _, k := range p.Keep {
		if hostpath.Within(path, k.Path) {
			return true
		}
	}
	return false
}

func appendHidden(list []Hidden, h Hidden) []Hidden {
	for _, o := range list {
		if o.Path == h.Path {
			return list
		}
	}
	return append(list, h)
}

func checkHide(p *Policy, arg, path, from string) (Hidden, error) {
	refuse := func(why string) (Hidden, error) { return Hidden{}, &Error{What: from, Path: arg, Reason: why} }
	if strings.ContainsRune(path, 0) {
		return refuse("contains a NUL byte")
	}
	canon, err := filepath.EvalSymlinks(filepath.Clean(path))
	if err != nil {
		return refuse(reason(err))
	}
	fi, err := os.Stat(canon)
	if err != nil {
		return refuse(reason(err))
	}
	if !fi.IsDir() && !fi.Mode().IsRegular() {
		why := notHideable + " (" + fileKind(fi.Mode()) + ", which an empty stand-in cannot be bound over)"
		if from == "--hide" {
			why += "; hide the directory that holds it instead"
		}
		return refuse(why)
	}
	if p.CacheDir == "" {
		return refuse("needs $XDG_CACHE_HOME or $HOME for the empty stand-ins")
	}
	for _, d := range append([]string{"/tmp", "/run"}, pseudo...) {
		if hostpath.Within(canon, d) {
			return refuse("lies in " + d + ", which the sandbox has its own of")
		}
	}
	switch {
	case canon == "/":
		return refuse("is the root directory")
	case hostpath.Within(p.Repo, canon):
		return refuse("contains the repository")
	case hostpath.Within(canon, filepath.Join(p.Repo, ".git")):
		return refuse("lies in the repository's Git metadata, which the Git protections mount over")
	}
	for _, d := range p.AddDirs {
		if hostpath.Within(d, canon) {
			return refuse("contains the added directory " + quote(d))
		}
		if hostpath.Within(canon, filepath.Join(d, ".git")) {
			return refuse("lies in the Git metadata of " + quote(d) + ", which the Git protections mount over")
		}
	}
	for _, k := range p.Keep {
		if hostpath.Within(k.Path, canon) {
			return refuse("contains the kept path " + quote(k.Path) + "; keep less or hide less")
		}
	}
	for _, own := range []string{p.CacheDir, p.StateDir} {
		if own != "" && (hostpath.Within(own, canon) || hostpath.Within(canon, own)) {
			return refuse("holds agentbox's own state or cache")
		}
	}
	return Hidden{Path: canon, Dir: fi.IsDir(), From: from}, nil
}

// notHideable begins checkHide's refusal of a path that is neither a directory nor
// a regular file.
const notHideable = "is neither a directory nor a regular file"

// fileKind names the type of a file that is neither a directory nor a regular file.
func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	}
	return "a special file"
}

// secretRemedy is what the operator can do about a path --hide-secrets found and
// cannot hide (a FIFO at a repository-local KUBECONFIG): the variable that names it
// when one does, so that the line says which to change.
func secretRemedy(path string, environ []string) string {
	for _, m := range SecretEnvPaths {
		for _, kv := range environ {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k != m.Var {
				continue
			}
			for _, e := range filepath.SplitList(v) {
				if filepath.IsAbs(e) && (filepath.Clean(e) == path || slices.ContainsFunc(m.Files, func(f string) bool { return filepath.Join(e, f) == path })) {
					return "; $" + k + " names it: point " + k + " at a regular file (or unset it) for the launch, or launch without --hide-secrets"
				}
			}
		}
	}
	return "; make it a regular file, or launch without --hide-secrets"
}
