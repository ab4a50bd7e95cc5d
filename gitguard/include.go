package gitguard

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/agentbox/agentbox/policy"
)

// maxIncludeDepth is Git's own bound on nested includes (MAX_INCLUDE_DEPTH in
// config.c): a deeper chain makes Git die, so nothing below it is ever read.
const maxIncludeDepth = 10

// IsInclude reports whether e names another config file for Git to read:
// include.path, or includeIf.<condition>.path. The condition is not evaluated: every
// caller needs the files Git could read, and a condition (gitdir:, onbranch:,
// hasconfig:) can become true later.
func IsInclude(e ConfigEntry) bool {
	return e.Key == "path" && (e.Section == "include" && e.Subsection == "" || e.Section == "includeif")
}

// IncludePaths returns the files the include entries of a config file name, resolved
// as Git resolves them: "~/" and "~user/" against home directories, a relative path
// against the directory of the including file. Entries Git would refuse (no value, a
// ~user that does not exist) are left out, as Git reads nothing for them.
func IncludePaths(entries []ConfigEntry, file, home string) []string {
	var out []string
	for _, e := range entries {
		if !IsInclude(e) || e.NoValue || e.Value == "" {
			continue
		}
		p, ok := expandPath(e.Value, home)
		if !ok {
			continue
		}
		if !filepath.IsAbs(p) {
			p = filepath.Join(filepath.Dir(file), p)
		}
		out = append(out, filepath.Clean(p))
	}
	return out
}

// expandPath does what Git's interpolate_path does with a leading "~" or "~user".
func expandPath(p, home string) (string, bool) {
	if !strings.HasPrefix(p, "~") {
		return p, true
	}
	name, rest, _ := strings.Cut(p[1:], "/")
	if name == "" {
		if home == "" {
			return "", false
		}
		return filepath.Join(home, rest), true
	}
	u, err := user.Lookup(name)
	if err != nil || u.HomeDir == "" {
		return "", false
	}
	return filepath.Join(u.HomeDir, rest), true
}

// HostConfigFiles returns the config files Git reads for every repository of the
// user, in the order Git reads them: the system file (unless GIT_CONFIG_NOSYSTEM) and
// the global files ($XDG_CONFIG_HOME/git/config, ~/.gitconfig), or what
// GIT_CONFIG_SYSTEM / GIT_CONFIG_GLOBAL name instead. getenv is os.Getenv outside tests.
func HostConfigFiles(getenv func(string) string) []string {
	var out []string
	if !envBool(getenv("GIT_CONFIG_NOSYSTEM")) {
		if p := getenv("GIT_CONFIG_SYSTEM"); p != "" {
			out = append(out, p)
		} else {
			out = append(out, "/etc/gitconfig")
		}
	}
	if p := getenv("GIT_CONFIG_GLOBAL"); p != "" {
		return append(out, p)
	}
	home := getenv("HOME")
	xdg := getenv("XDG_CONFIG_HOME")
	if xdg == "" && home != "" {
		xdg = filepath.Join(home, ".config")
	}
	if xdg != "" {
		out = append(out, filepath.Join(xdg, "git", "config"))
	}
	if home != "" {
		out = append(out, filepath.Join(home, ".gitconfig"))
	}
	return out
}

func envBool(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}

// canonical resolves every symlink of path as far as path exists and appends the
// missing rest. missing is the first component that does not exist ("" when path
// exists); canon is "" when the existing part cannot be resolved.
//
// Resolution only reads link targets (lstat, readlink); nothing is opened, so a
// planted FIFO or device cannot block it.
func canonical(path string) (canon, missing string) {
	path = filepath.Clean(path)
	existing, rest := path, ""
	for {
		if _, err := os.Lstat(existing); err == nil {
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", ""
		}
		parent := filepath.Dir(existing)
		if parent == existing {
			return "", ""
		}
		rest = filepath.Join(filepath.Base(existing), rest)
		existing = parent
	}
	resolved, err := filepath.EvalSymlinks(existing)
	if errors.Is(err, fs.ErrNotExist) {
		// existing is a dangling symlink: follow it by hand to what is missing.
		t, lerr := lexicalTarget(existing)
		if lerr != nil || t == "" {
			return "", ""
		}
		return canonical(filepath.Join(t, rest))
	}
	if err != nil {
		return "", ""
	}
	if rest == "" {
		return resolved, ""
	}
	first, _, _ := strings.Cut(rest, "/")
	return filepath.Join(resolved, rest), filepath.Join(resolved, first)
}

// includes protects, for each config file in files (and each file those include, to
// Git's depth bound), every include target that resolves inside the repository: the
// file itself when it exists, else a placeholder for its first missing component, so
// the sandbox can neither change nor create it.
func (c *collector) includes(files []string, home string) {
	seen := map[string]bool{}
	var visit func(file string, depth int)
	visit = func(file string, depth int) {
		if c.err != nil || depth >= maxIncludeDepth || seen[file] {
			return
		}
		seen[file] = true
		entries, err := readHostConfig(file)
		if err != nil {
			return // Git reads nothing from a file it cannot open or parse
		}
		for _, target := range IncludePaths(entries, file, home) {
			canon, missing := canonical(target)
			if canon == "" {
				continue
			}
			if policy.Within(canon, c.repo) {
				if missing == "" {
					c.add(canon, false, true)
				} else {
					c.push(Protected{Path: missing, Dir: missing != canon})
				}
			}
			if missing == "" {
				visit(canon, depth+1)
			}
		}
	}
	for _, f := range files {
		visit(f, 0)
	}
}

// readHostConfig reads a config file as Git would find it (following symlinks), but
// refuses anything that is not a regular file, and opens it non-blocking so that a
// FIFO cannot hang the launcher.
func readHostConfig(path string) ([]ConfigEntry, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	return ParseConfig(io.LimitReader(f, maxConfigSize))
}

// maxConfigSize bounds what is read of one config file; Git's own files are tiny, and
// a hostile one must not make agentbox read gigabytes.
const maxConfigSize = 16 << 20

// OutsideGitDirs returns the Git directories of repo that lie outside it and that a
// session may write: a verified linked worktree's common dir (FindLinkedWorktree),
// which holds the worktree's own gitdir and is bound writable. An unverified .git
// file gets nothing: its metadata stays read-only, and the audit must not wander
// wherever a planted pointer sends it (it reports such a pointer instead).
func OutsideGitDirs(repo string) []string {
	w, err := FindLinkedWorktree(repo)
	if err != nil || w == nil {
		return nil
	}
	return []string{w.CommonDir}
}
