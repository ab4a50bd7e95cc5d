package policy

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentbox/agentbox/internal/hostpath"
)

// Hidden is one path that is empty inside the sandbox (--hide, --hide-secrets): an
// empty read-only directory or file is bound over it.
type Hidden struct {
	Path string // canonical
	Dir  bool
	From string // "--hide" or "--hide-secrets"
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
	".claude/.credentials.json", ".codex/auth.json",
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
	if p.Home == "" {
		return &Error{What: "--hide-secrets", Reason: "there is no HOME to hide secrets in ($HOME is unset, / or missing)"}
	}
	var list []string
	for _, rel := range Secrets {
		list = append(list, filepath.Join(p.Home, rel))
	}
	list = append(list, secretSSH(filepath.Join(p.Home, ".ssh"))...)
	for _, path := range list {
		if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if p.inKept(path) {
			continue // the agent's own credentials, kept by its preset or --keep
		}
		h, err := checkHide(p, path, path, "--hide-secrets")
		if err != nil {
			var pe *Error
			if errors.As(err, &pe) && pe.Reason == "does not exist" {
				continue // a dangling symlink: nothing to read
			}
			return err
		}
		p.Hide = appendHidden(p.Hide, h)
	}
	return nil
}

// secretSSH lists the private keys in dir: every regular file but the public
// keys, known_hosts, authorized_keys and config.
func secretSSH(dir string) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		n := e.Name()
		if strings.HasSuffix(n, ".pub") || strings.HasPrefix(n, "known_hosts") ||
			strings.HasPrefix(n, "authorized_keys") || n == "config" || e.IsDir() {
			continue
		}
		out = append(out, filepath.Join(dir, n))
	}
	return out
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
		return refuse("is neither a directory nor a regular file")
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
