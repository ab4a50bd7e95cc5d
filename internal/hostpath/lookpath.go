// Package hostpath holds the path helpers the launcher's packages share: whether a
// path lies below a directory, the Git working tree a directory is in, and a
// program on $PATH that the launcher may run on the host (one no sandbox could have
// planted). It only reads the file system and knows nothing of a policy.
package hostpath

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/agentbox/agentbox/internal/grantledger"
	"github.com/agentbox/agentbox/internal/termsafe"
)

// LookPath finds the program name on $PATH for agentbox to run on the host (bwrap,
// the shadow recorder's git, the bench's go and git), skipping every place a sandbox
// could have planted it. A session's command runs with the operator's PATH and can
// write its repository; a PATH entry that names a directory inside it would make the
// launcher run the sandbox's program as the operator, with the whole argv. So an
// entry is skipped when it is
//
//   - relative or empty ("." and "" mean the working directory, which is usually the
//     repository);
//   - inside one of writable (the session's writable host directories), before or
//     after symlinks are resolved, or resolves into one of them;
//   - the same for the directories any earlier session was given writable
//     (internal/grantledger, read from the state directory of the environment):
//     a session of last week with --add-dir ~/tools/bin could have put a git there;
//     also when such a directory has been renamed, bind-mounted or linked to since
//     (Grants.Holding: by its identity);
//   - for a user other than root, a program of the user's with a second name (a
//     hard link) on the file system of such a directory (Grants.SharedName);
//   - inside a Git working tree (a directory with a .git entry at or above it):
//     agentbox's default repository is the Git top level of the working directory,
//     so any such tree may have been a session's repository, today or earlier;
//   - writable by others (mode o+w), or the program itself is.
//
// The same holds for the program file after symlinks are resolved, and (but for
// the Git working tree) for every directory holding a symbolic link on the way to
// it (linkDirs): a session that cannot write a program can still plant a link to
// any program of the host. The error names
// what was skipped, so that an operator who put a tool inside a repository on
// purpose knows to name it explicitly (AGENTBOX_BWRAP, for bwrap).
func LookPath(name string, writable ...string) (string, error) {
	if name == "" || strings.ContainsRune(name, '/') {
		return "", fmt.Errorf("look up %q: not a plain program name", name)
	}
	var roots []string
	for _, w := range writable {
		if w == "" {
			continue
		}
		if abs, err := filepath.Abs(w); err == nil {
			roots = append(roots, abs, canonicalOr(abs))
		}
	}
	earlier, err := Granted()
	if err != nil {
		return "", fmt.Errorf("look up %s: %w", name, err)
	}
	var skipped []string
	fromLedger := false
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		bin := filepath.Join(dir, name)
		why, via := untrustedProgram(dir, bin, roots)
		if why == "" {
			if g, byName := grantedEarlier(dir, bin, via, earlier); g != "" {
				why, fromLedger = "inside "+quote(g)+", which an earlier session was given writable", true
				if !byName {
					why = "inside the directory an earlier session was given writable as " + quote(g) + ", under another name now"
				}
			} else if g, names := earlier.SharedName(bin); g != "" {
				why, fromLedger = fmt.Sprintf("it has %d names (hard links), yours to write, on the file system of %s, which an earlier session was given writable: it could have written it through a name there", names, quote(g)), true
			}
		}
		if why != "" {
			if why != "missing" && len(skipped) < 8 {
				skipped = append(skipped, fmt.Sprintf("%s (%s)", bin, why))
			}
			continue
		}
		return filepath.Clean(bin), nil
	}
	msg := fmt.Sprintf("%s not found on PATH", name)
	if len(skipped) > 0 {
		msg += "; skipped, since a sandbox could have written them: " + strings.Join(skipped, ", ")
	}
	if fromLedger {
		msg += "; take such a directory off PATH, or check it and remove its lines from " + quote(earlier.Ledger) + " and the identities beside it"
	}
	return "", &NotFoundError{Name: name, Msg: msg}
}

// Grants are the directories sessions were given writable so far, as the ledger
// in the state directory this process's environment names lists them.
type Grants struct {
	Ledger  string // the ledger's path, for messages
	Entries []grantledger.Entry
}

// Granted reads Grants; a ledger it cannot trust is an error (grantledger.Read).
func Granted() (Grants, error) {
	state := grantledger.StateDirFromEnv()
	entries, err := grantledger.Read(state)
	return Grants{Ledger: grantledger.Path(state), Entries: entries}, err
}

// WithGranted returns writable and, after it, the directories sessions were given
// writable so far (Granted): the set a program agentbox runs on the host must lie
// outside, for the checks that take their own list (InsideWritable) rather than
// LookPath's PATH search, and the Grants, whose Holding finds the same
// directories under other names. A ledger it cannot trust is an error.
func WithGranted(writable ...string) ([]string, Grants, error) {
	g, err := Granted()
	if err != nil {
		return nil, g, err
	}
	return append(writable[:len(writable):len(writable)], grantledger.Dirs(g.Entries)...), g, nil
}

// Holding returns the entry whose directory path is or lies in, found by the
// identity of path (after symlinks) and of each directory above it, or "": a
// granted directory renamed, bind-mounted elsewhere or reached through a link
// keeps its device and inode. Where path is itself a link, the directory holding
// it is looked at too: whoever writes there chooses where it leads. One statx per
// component, only where the ledger recorded an identity.
func (g Grants) Holding(path string) string {
	path = filepath.Clean(path)
	if e := g.holdingCanonical(canonicalOr(path)); e != "" {
		return e
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		return g.holdingCanonical(canonicalOr(filepath.Dir(path)))
	}
	return ""
}

// holdingCanonical is Holding of a path whose symlinks are resolved already.
func (g Grants) holdingCanonical(canon string) string {
	known := 0
	for _, e := range g.Entries {
		if e.ID.Known() {
			known++
		}
	}
	if known == 0 {
		return ""
	}
	for p := canon; ; p = filepath.Dir(p) {
		if id := grantledger.IdentityOf(p); id.Known() {
			for _, e := range g.Entries {
				if e.ID == id {
					return e.Dir
				}
			}
		}
		if p == "/" {
			return ""
		}
	}
}

// SharedName returns the entry on whose file system bin (after symlinks) lies
// when it is a file with more than one name that a session of the user's could
// write (owned by the user, for a user other than root), and its count of names;
// "" otherwise. A grant's file written through one name changes every other:
// ~/bin/git hard-linked to ~/tools/bin/git with ~/tools once granted. Its other
// names cannot be found without a walk of the grants, and hard links do not cross
// file systems, so the file system is what is compared. For root every system
// program would count (Debian's /usr/bin/git has two names, root's to write), so
// root is not asked this (docs/security.md).
func (g Grants) SharedName(bin string) (entry string, names uint64) {
	euid := os.Geteuid()
	if euid == 0 || len(g.Entries) == 0 {
		return "", 0
	}
	fi, err := os.Stat(bin)
	if err != nil || !fi.Mode().IsRegular() {
		return "", 0
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || uint64(st.Nlink) < 2 || int(st.Uid) != euid {
		return "", 0
	}
	for _, e := range g.Entries {
		id := e.ID
		if !id.Known() {
			id = grantledger.IdentityOf(e.Dir)
		}
		if id.Known() && id.Dev == uint64(st.Dev) {
			return e.Dir, uint64(st.Nlink)
		}
	}
	return "", 0
}

// grantedEarlier returns the entry of granted that dir/bin (which untrustedProgram
// accepted: it exists) lies in, before or after symlinks, or one of via (the
// directories of the links on the way to it) lies in (byName), or by the identity
// of the directories they lie in; "" for none.
func grantedEarlier(dir, bin string, via []string, granted Grants) (entry string, byName bool) {
	if len(granted.Entries) == 0 {
		return "", false
	}
	forms := append([]string{canonicalOr(bin), filepath.Clean(dir), canonicalOr(dir)}, via...)
	for _, e := range granted.Entries {
		for _, f := range forms {
			if Within(f, e.Dir) {
				return e.Dir, true
			}
		}
	}
	for _, f := range append(forms[:1], via...) {
		if g := granted.holdingCanonical(f); g != "" {
			return g, false
		}
	}
	return "", false
}

// linkDirs returns the directory, its links resolved, that holds each symbolic
// link met on the way from path (absolute) to the file it names (Resolve's
// Links): whoever can write one of them chooses that file. A path Resolve cannot
// follow gives the links met so far (EvalSymlinks has resolved it just before;
// a change since is the race any lookup has).
func linkDirs(path string) []string {
	r, _ := Resolve("/", path)
	dirs := make([]string, 0, len(r.Links))
	for _, l := range r.Links {
		dirs = append(dirs, filepath.Dir(l))
	}
	return dirs
}

// NotFoundError says that LookPath found no program it may run.
type NotFoundError struct {
	Name string
	Msg  string // names what was skipped and why
}

func (e *NotFoundError) Error() string { return e.Msg }

// untrustedProgram says why bin (dir/name, from a PATH entry) may not run on the
// host, "missing" when there is no executable file, or "" when it may run; via are
// the directories holding the links on the way to it (linkDirs), for the checks
// that follow.
func untrustedProgram(dir, bin string, writable []string) (why string, via []string) {
	if dir == "" || !filepath.IsAbs(dir) {
		if fi, err := os.Stat(bin); err != nil || fi.IsDir() {
			return "missing", nil
		}
		return "relative PATH entry", nil
	}
	// Most entries do not hold the program: one stat decides, before any resolving.
	fi, err := os.Stat(bin)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return "missing", nil
	}
	dir = filepath.Clean(dir)
	canonDir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "missing", nil
	}
	canon, err := filepath.EvalSymlinks(bin)
	if err != nil {
		return "missing", nil
	}
	via = linkDirs(filepath.Join(dir, filepath.Base(bin)))
	for _, p := range append([]string{dir, canonDir, canon}, via...) {
		for _, w := range writable {
			if Within(p, w) {
				return "inside " + quote(w) + ", which the sandbox can write", via
			}
		}
	}
	dirs := []string{canonDir}
	if d := filepath.Dir(canon); d != canonDir {
		dirs = append(dirs, d)
	}
	for _, p := range dirs {
		if top, ok := GitTree(p); ok {
			return "inside the Git working tree " + quote(top) + ", which a session may write", via
		}
	}
	// The links' directories are held to every rule but the Git working tree's:
	// /etc/alternatives lies in one under etckeeper, and a repository a session
	// was given is in the ledger (grantedEarlier).
	for _, p := range append(dirs, via...) {
		if st, err := os.Stat(p); err == nil && st.Mode().Perm()&0o002 != 0 {
			return "its directory is writable by others", via
		}
	}
	if fi.Mode().Perm()&0o002 != 0 {
		return "writable by others", via
	}
	return "", via
}

// Within reports whether path is dir or lies below it. Both must be clean and absolute.
func Within(path, dir string) bool {
	if dir == "/" {
		return true
	}
	return path == dir || strings.HasPrefix(path, dir+"/")
}

// GitTopLevel returns the nearest directory at or above dir that holds a .git entry
// (a directory, or a file as in linked worktrees and submodules), or dir itself.
// It looks only at names: running git here could run the repository's own config.
func GitTopLevel(dir string) string {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(filepath.Join(d, ".git")); err == nil {
			return d
		}
		if d == "/" {
			return dir
		}
	}
}

func quote(p string) string { return termsafe.Quote(p) }

// GitTree reports the nearest directory at or above dir (canonical) holding a .git
// entry.
func GitTree(dir string) (string, bool) {
	top := GitTopLevel(dir)
	if _, err := os.Lstat(filepath.Join(top, ".git")); err == nil {
		return top, true
	}
	return "", false
}

func canonicalOr(p string) string {
	if c, err := filepath.EvalSymlinks(p); err == nil {
		return c
	}
	return p
}

// InsideWritable reports the root of writable that path (absolute) lies in, before or
// after symlinks are resolved.
func InsideWritable(path string, writable ...string) (string, bool) {
	forms := []string{filepath.Clean(path), canonicalOr(path)}
	for _, w := range writable {
		if w == "" {
			continue
		}
		abs, err := filepath.Abs(w)
		if err != nil {
			continue
		}
		for _, root := range []string{abs, canonicalOr(abs)} {
			for _, f := range forms {
				if Within(f, root) {
					return w, true
				}
			}
		}
	}
	return "", false
}
