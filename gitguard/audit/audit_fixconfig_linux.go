package audit

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/gitguard/gitconfig"
	"github.com/agentbox/agentbox/internal/hostpath"
	"github.com/agentbox/agentbox/internal/safepath"
)

// What `agentbox audit --fix` does to a config file. Moving the whole file aside, as
// for a hook, would take the user's remotes and branches with it; so the config is
// written again without its dangerous entries, and a copy of the whole file as it
// was is kept for review. Entries that name a program the way a user sets one for
// themself (an editor, a pager: a plain command, no shell syntax, nothing from inside
// the repository) are the user's own settings: they are reported apart and kept.

// ownSettingKey says whether e's key, with a plain value, is an ordinary personal
// setting.
func ownSettingKey(e gitconfig.Entry) bool {
	switch e.Section + "." + e.Key {
	case "core.editor", "core.pager", "sequence.editor", "diff.tool", "merge.tool", "gpg.program":
		return true
	}
	return e.Section == "pager" && e.Subsection == ""
}

// plainCommand reports whether v is a program name or path and simple arguments,
// separated by spaces, with no shell syntax (quotes, $, `, ;, |, &, <, >, (, ), {,
// }, !, *, ?, ~, \, tabs, newlines). A function, not a regexp: no start-up work.
func plainCommand(v string) bool {
	for _, w := range strings.Split(v, " ") {
		if w == "" {
			return false
		}
		for _, r := range w {
			ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
				strings.ContainsRune("_./+=:@%,-", r)
			if !ok {
				return false
			}
		}
	}
	return v != ""
}

// OwnSetting reports whether e, which names a program, looks like the user's own
// setting rather than a plant: one of the personal keys (an editor, a pager), with a
// plain command whose program is a bare name (found on PATH) or an absolute path.
// A relative path with a slash could name a program inside the repository.
func OwnSetting(e gitconfig.Entry) bool { return ownSetting(e, nil) }

// ownSetting is OwnSetting for an entry of a config below roots (the scanned
// repository and Git dirs, which a sandbox could write), where it is stricter:
// the program takes no argument and lies outside roots. Git runs the pager and
// the editor in the top of the working tree, so an argument can name a file of
// it for a program to run or read as commands (`sh .p`, `vim -S`, `less
// --lesskey-src=k`); nothing tells such an argument from an option.
func ownSetting(e gitconfig.Entry, roots []string) bool {
	if !ownSettingKey(e) || e.NoValue {
		return false
	}
	v := strings.TrimSpace(e.Value)
	if !plainCommand(v) {
		return false
	}
	prog, args, _ := strings.Cut(v, " ")
	if len(roots) > 0 && (args != "" || slices.ContainsFunc(roots, func(r string) bool { return hostpath.Within(filepath.Clean(prog), r) })) {
		return false
	}
	return !strings.Contains(prog, "/") || filepath.IsAbs(prog)
}

// treeRoots is roots when path is a config a session could have written: below
// one of them, but not the repository's own .git/config, which every session gets
// read-only (a launch without it protected is refused), so that what it names is
// the user's as in ~/.gitconfig; nor a linked worktree's common dir's config (a Git
// dir among roots[1:] with no commondir of its own), the main worktree's
// .git/config, which a session in the worktree gets read-only as well
// (gitguard.ProtectedPaths covers the common dir it binds). Else nil.
func treeRoots(path string, roots []string) []string {
	if len(roots) > 0 && filepath.Clean(path) == filepath.Join(roots[0], ".git", "config") {
		return nil
	}
	for _, r := range roots[min(1, len(roots)):] {
		if filepath.Clean(path) == filepath.Join(r, "config") && commonDir(r) {
			return nil
		}
	}
	if slices.ContainsFunc(roots, func(r string) bool { return hostpath.Within(path, r) }) {
		return roots
	}
	return nil
}

// commonDir says whether the Git dir dir is a common dir: it names none of its
// own (a linked worktree's gitdir has a commondir file).
func commonDir(dir string) bool {
	_, err := os.Lstat(filepath.Join(dir, "commondir"))
	return errors.Is(err, fs.ErrNotExist)
}

// flaggedBy returns the reasons of f that describe entry e, as the scan wrote them
// (describe).
func flaggedBy(e gitconfig.Entry, reasons []string) []string {
	prefix := strings.TrimSuffix(describe(e, ""), " ()")
	var out []string
	for _, r := range reasons {
		if strings.HasPrefix(r, prefix+" (") {
			out = append(out, r)
		}
	}
	return out
}

// SplitOwnSettings moves, out of each config finding's reasons, those that describe
// the user's own settings (OwnSetting), and returns them, one line each with the
// file. Findings left with no reason are dropped.
func SplitOwnSettings(findings []Finding) (kept []Finding, own []string) {
	for _, f := range findings {
		if f.Kind != KindConfig {
			kept = append(kept, f)
			continue
		}
		entries, err := readConfigNoFollow(f.Path)
		if err != nil {
			kept = append(kept, f)
			continue
		}
		mine := map[string]bool{}
		in := treeRoots(f.Path, f.roots)
		for _, e := range entries {
			if ownSetting(e, in) {
				for _, r := range flaggedBy(e, f.Reasons) {
					mine[r] = true
					own = append(own, oneLine(f.Path)+": "+r)
				}
			}
		}
		var rest []string
		for _, r := range f.Reasons {
			if !mine[r] {
				rest = append(rest, r)
			}
		}
		if len(rest) > 0 {
			f.Reasons = rest
			kept = append(kept, f)
		}
	}
	return kept, own
}

// FixConfig writes the config file of finding f again without the entries its
// reasons name, except the user's own settings, and keeps a copy of the whole file
// as it was at root/ID/PATH. It fills in f.Moved (where the copy is) or f.MoveErr.
func FixConfig(f *Finding, id, root string) {
	copyPath, err := fixConfig(f.Path, f.Reasons, id, root, f.roots)
	if denied(err) {
		// Below a directory the scan read only by widening its mode
		// (audit_unreadable_linux.go): widened again for the fix.
		r := &relaxer{Roots: f.roots}
		if r.Widen(f.Path) {
			copyPath, err = fixConfig(f.Path, f.Reasons, id, root, f.roots)
		}
		r.Restore()
	}
	if err != nil {
		f.MoveErr = err
		return
	}
	f.Moved = copyPath
	f.Reasons = append(f.Reasons, "these entries removed from the file; the rest of it kept")
}

func fixConfig(path string, reasons []string, id, root string, roots []string) (string, error) {
	// Every step through one descriptor of the directory, reached without a symlink
	// below the scan's roots (canonical): a session running meanwhile may swap a
	// directory there for a symlink to one of the user's, whose config would be
	// rewritten instead. A host config outside them (HOME's, which may lie behind a
	// symlink) is taken where its directory resolves.
	dir := filepath.Dir(path)
	if !slices.ContainsFunc(roots, func(r string) bool { return hostpath.Within(dir, r) }) {
		if c, err := filepath.EvalSymlinks(dir); err == nil {
			dir = c
		}
	}
	dfd, err := safepath.Open(dir, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return "", err
	}
	defer unix.Close(dfd)
	name := filepath.Base(path)
	data, mode, err := readConfigAt(dfd, name)
	if err != nil {
		return "", err
	}
	entries, err := gitconfig.Parse(strings.NewReader(string(data)))
	if err != nil {
		return "", fmt.Errorf("cannot be parsed, so cannot be edited (%v); move it aside by hand", err)
	}
	var keep []gitconfig.Entry
	removed := 0
	in := treeRoots(path, roots)
	for _, e := range entries {
		if len(flaggedBy(e, reasons)) > 0 && !ownSetting(e, in) {
			removed++
			continue
		}
		keep = append(keep, e)
	}
	if removed == 0 {
		return "", errors.New("no entry to remove")
	}
	// The copy first: nothing of the user's is lost if the rewrite fails.
	copyPath := filepath.Join(root, id, path)
	if err := os.MkdirAll(filepath.Dir(copyPath), 0o700); err != nil {
		return "", fmt.Errorf("keep a copy: %w", err)
	}
	if err := writeNew(copyPath, data, 0o600); err != nil {
		return "", fmt.Errorf("keep a copy: %w", err)
	}
	tmp := name + ".agentbox-fix-" + id
	fd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(mode.Perm()))
	if err != nil {
		return "", fmt.Errorf("write the fixed config: %w", err)
	}
	if err := writeFd(fd, tmp, []byte(gitconfig.Format("rewritten by agentbox audit --fix: entries that make Git run a program were removed", keep))); err != nil {
		_ = unix.Unlinkat(dfd, tmp, 0)
		return "", fmt.Errorf("write the fixed config: %w", err)
	}
	if err := unix.Renameat(dfd, tmp, dfd, name); err != nil {
		_ = unix.Unlinkat(dfd, tmp, 0)
		return "", fmt.Errorf("replace the config: %w", err)
	}
	return copyPath, nil
}

// readConfigAt is readConfigBytes for the entry name of the directory dfd.
func readConfigAt(dfd int, name string) ([]byte, os.FileMode, error) {
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, 0, err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, 0, fmt.Errorf("%s: not a regular file", name)
	}
	return readConfigFile(f)
}

// writeFd writes data to the new file open at fd, syncs and closes it.
func writeFd(fd int, name string, data []byte) error {
	return writeSynced(os.NewFile(uintptr(fd), name), data)
}

// writeSynced writes data to f, syncs and closes it.
func writeSynced(f *os.File, data []byte) error {
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// readConfigNoFollow parses a config file opened without following a symlink.
func readConfigNoFollow(path string) ([]gitconfig.Entry, error) {
	data, _, err := readConfigBytes(path)
	if err != nil {
		return nil, err
	}
	return gitconfig.Parse(strings.NewReader(string(data)))
}

// readConfigBytes reads a config file (regular, at most gitconfig.MaxFileSize, never through
// a symlink or blocking on a FIFO: safepath.OpenRegular) and returns its permission bits.
func readConfigBytes(path string) ([]byte, os.FileMode, error) {
	f, err := safepath.OpenRegular(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	return readConfigFile(f)
}

// readConfigFile reads the open config file f (at most gitconfig.MaxFileSize) and
// returns its permission bits.
func readConfigFile(f *os.File) ([]byte, os.FileMode, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	data, err := io.ReadAll(io.LimitReader(f, gitconfig.MaxFileSize+1))
	if err != nil {
		return nil, 0, err
	}
	if len(data) > gitconfig.MaxFileSize {
		return nil, 0, fmt.Errorf("larger than %d bytes", gitconfig.MaxFileSize)
	}
	return data, fi.Mode().Perm() | fi.Mode()&(os.ModeSetuid|os.ModeSetgid|os.ModeSticky), nil
}

// writeNew creates path (it must not exist) with data and mode, and syncs it.
func writeNew(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, mode)
	if err != nil {
		return err
	}
	return writeSynced(f, data)
}
