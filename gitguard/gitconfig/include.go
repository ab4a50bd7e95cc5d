package gitconfig

import (
	"bytes"
	"errors"
	"io"
	"os/user"
	"path/filepath"
	"strings"

	"github.com/agentbox/agentbox/internal/safepath"
)

// MaxIncludeDepth is Git's own bound on nested includes (MAX_INCLUDE_DEPTH in
// config.c): a deeper chain makes Git die, so nothing below it is ever read.
const MaxIncludeDepth = 10

// IsInclude reports whether e names another config file for Git to read:
// include.path, or includeIf.<condition>.path. The condition is not evaluated: every
// caller needs the files Git could read, and a condition (gitdir:, onbranch:,
// hasconfig:) can become true later.
func IsInclude(e Entry) bool {
	return e.Key == "path" && (e.Section == "include" && e.Subsection == "" || e.Section == "includeif")
}

// IncludePaths returns the files the include entries of a config file name, resolved
// as Git resolves them: "~/" and "~user/" against home directories, a relative path
// against the directory of the including file. Entries Git would refuse (no value, a
// ~user that does not exist) are left out, as Git reads nothing for them.
func IncludePaths(entries []Entry, file, home string) []string {
	var out []string
	for _, e := range entries {
		if !IsInclude(e) || e.NoValue || e.Value == "" {
			continue
		}
		p, ok := ExpandPath(e.Value, home)
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

// ExpandPath does what Git's interpolate_path does with a leading "~" or "~user".
func ExpandPath(p, home string) (string, bool) {
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

// ReadHostFile reads a config file as Git would find it (following symlinks), but
// refuses anything that is not a regular file without opening it
// (safepath.OpenRegularFollow): a FIFO cannot hang the launcher, and a device a
// planted link names is not opened (a watchdog is armed by its open).
func ReadHostFile(path string) ([]Entry, error) { return ReadHostFileWithin(path, nil) }

// ErrOverBudget is ReadHostFileWithin's refusal when spend refused the file's bytes.
var ErrOverBudget = errors.New("over the reader's bound")

// ReadHostFileWithin is ReadHostFile with the file's bytes (at most MaxFileSize)
// counted by spend, nil for no count: first the size the open file reports, then,
// for a file that grew meanwhile, what was read beyond it. One open, and the size,
// the type and the bytes all come from that descriptor: a file replaced between a
// stat of its path and its read cannot make the caller count one file and parse
// another.
func ReadHostFileWithin(path string, spend func(n int64) bool) ([]Entry, error) {
	f, err := safepath.OpenRegularFollow(path)
	if errors.Is(err, safepath.ErrNotRegular) {
		return nil, errors.New("not a regular file")
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if spend == nil {
		return Parse(io.LimitReader(f, MaxFileSize))
	}
	counted := min(fi.Size(), MaxFileSize)
	if !spend(counted) {
		return nil, ErrOverBudget
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize))
	if err != nil {
		return nil, err
	}
	if n := int64(len(data)); n > counted && !spend(n-counted) {
		return nil, ErrOverBudget
	}
	return Parse(bytes.NewReader(data))
}

// MaxFileSize bounds what is read of one config file; Git's own files are tiny, and
// a hostile one must not make agentbox read gigabytes.
const MaxFileSize = 16 << 20
