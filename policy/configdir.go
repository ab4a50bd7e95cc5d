package policy

import (
	"errors"
	"io/fs"
	"path/filepath"

	"github.com/agentbox/agentbox/internal/hostpath"
)

// ConfigFile is the user's config file below Policy.ConfigDir.
const ConfigFile = "config.toml"

// configForms are the places where the user's config file can be changed: the
// config directory, with the symlinks on its way resolved as far as it exists (a
// ~/.config that is a link into a dotfiles repository), and the config file's own
// target when it is a symlink (a file managed by stow). None may be writable
// inside: what the sandbox wrote there would be the policy of its next session.
func (p *Policy) configForms() []string {
	if p.ConfigDir == "" {
		return nil
	}
	forms := []string{p.ConfigDir}
	add := func(f string) {
		for _, o := range forms {
			if o == f {
				return
			}
		}
		forms = append(forms, f)
	}
	add(resolveExisting(p.ConfigDir))
	file := filepath.Join(p.ConfigDir, ConfigFile)
	if c, err := filepath.EvalSymlinks(file); err == nil {
		add(c)
		add(filepath.Dir(c))
	}
	return forms
}

// resolveExisting resolves the symlinks of path's longest existing ancestor and
// joins the rest to it.
func resolveExisting(path string) string {
	rest := ""
	for cur := path; ; cur = filepath.Dir(cur) {
		if c, err := filepath.EvalSymlinks(cur); err == nil {
			return filepath.Join(c, rest)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return path
		}
		if cur == "/" || cur == "." {
			return path
		}
		rest = filepath.Join(filepath.Base(cur), rest)
	}
}

// checkConfigNotWritable refuses a writable directory (what: "repo", "--add-dir",
// "--keep") that holds the user's config, or lies inside its directory.
func (p *Policy) checkConfigNotWritable(what, arg, dir string) error {
	for _, f := range p.configForms() {
		if hostpath.Within(f, dir) || hostpath.Within(dir, f) {
			return &Error{What: what, Path: arg, Reason: "holds agentbox's own config (" + quote(filepath.Join(p.ConfigDir, ConfigFile)) +
				"), which the sandbox could change to widen its next session; set XDG_CONFIG_HOME elsewhere or keep the config out of it"}
		}
	}
	return nil
}
