package policy

import (
	"path/filepath"
	"strings"

	"github.com/agentbox/agentbox/internal/hostpath"
)

// Writable grants and Git directories (P7). Git runs a Git directory's hooks and
// config later as the operator, outside the sandbox; the repository's own are bound
// read-only, but a writable grant that is, or lies in, some Git directory would hand
// the sandbox another one's (OTHER/.git/hooks, .git/modules/x, a bare repository's
// hooks, a gitdir a .git file names). Every host path the sandbox can write goes
// through CheckGrant: policy.New checks the repository, --add-dir, --keep and
// --disk-tmp's directory, the session core the rest (a linked worktree's metadata,
// the snapshot store), and the session core refuses a writable bind in the plan whose
// source lies in no checked grant, so that a new grant cannot skip the check.

// GrantKind says what a writable grant may hold of Git's.
type GrantKind int

const (
	// GrantTree (the repository, --add-dir): may hold a .git of its own, whose
	// exec surface the session binds read-only and audits (P7); may neither be a Git
	// directory nor lie in one.
	GrantTree GrantKind = iota
	// GrantPlain (--keep): nothing of Git's is protected or audited in it, so it
	// may not even hold a .git at its top.
	GrantPlain
	// GrantGitDir (a linked worktree's common dir): is a Git directory, whose exec
	// surface the session protects; may not lie in another one.
	GrantGitDir
)

// FileID is a file's identity: its device and inode numbers.
type FileID struct{ Dev, Ino uint64 }

// Grant is one host path the sandbox can write, as CheckGrant saw it.
type Grant struct {
	What string // "repo", "--add-dir", "--keep" …
	Path string // canonical
	Kind GrantKind
	// ID is the path's identity when CheckGrant saw it; zero when it did not exist
	// (a preset's kept path the launcher creates). The session core pins the bind
	// of the path to it (mounts.Op.SourceID).
	ID FileID
}

// Covers reports whether path is the grant's path or lies below it.
func (g Grant) Covers(path string) bool { return hostpath.Within(path, g.Path) }

// CheckGrant applies the Git-directory rule to one writable grant: path (absolute;
// the symlinks of its existing part are resolved first) must not be a Git directory
// (unless kind is GrantGitDir) nor lie in one, and a GrantPlain may not hold a .git.
// A Git directory is one named .git, or one with Git's shape: HEAD beside objects/,
// refs/ or commondir (a bare repository, a gitdir a .git file or commondir names, a
// $GIT_DIR). The path is walked from / one component at a time without following a
// link, and each directory on the way is inspected through the descriptor the walk
// holds, so a component swapped for a link during the check fails it instead of
// sending it elsewhere. what and arg name the grant in the refusal.
func CheckGrant(what, arg, path string, kind GrantKind) (Grant, error) {
	refuse := func(why string) (Grant, error) { return Grant{}, &Error{What: what, Path: arg, Reason: why} }
	if !filepath.IsAbs(path) {
		return refuse("is not absolute")
	}
	canon := resolveExisting(filepath.Clean(path))
	seen, err := inspect(canon)
	if err != nil {
		return refuse(err.Error() + "; not launching")
	}
	// A missing tail is checked by name: a .git there would be created in a Git
	// directory's place.
	if seen.inside == "" && seen.missing != "" {
		for d := canon; hostpath.Within(d, seen.missing); d = filepath.Dir(d) {
			if isDotGit(filepath.Base(d)) {
				seen.inside = d
				seen.why = "named .git"
			}
		}
		if seen.inside == canon {
			seen.inside, seen.leaf = "", seen.why
		}
	}
	shown := ""
	if a := filepath.Clean(arg); filepath.IsAbs(a) && a != canon {
		shown = "resolves to " + quote(canon) + ", which "
	}
	switch {
	case seen.inside != "":
		return refuse(shown + "lies in a Git directory, " + quote(seen.inside) + " (" + seen.why +
			"), whose config and hooks the operator's Git runs (P7); agentbox makes nothing inside one writable")
	case seen.leaf != "" && kind != GrantGitDir:
		hint := "use its work tree"
		if what == "--keep" {
			hint = "agentbox does not keep one"
		}
		return refuse(shown + "is a Git directory (" + seen.leaf + "), whose config and hooks the operator's Git runs (P7); " + hint)
	case seen.leaf == "" && kind == GrantGitDir && seen.missing == "":
		return refuse(shown + "is not a Git directory")
	case seen.dotGit && kind == GrantPlain:
		return refuse(shown + "is a Git work tree; its .git config and hooks would be writable (P7); make it the repository instead")
	}
	return Grant{What: what, Path: canon, Kind: kind, ID: seen.id}, nil
}

// inspection is what inspect saw on the way to a path.
type inspection struct {
	inside  string // the first directory above the path that is a Git directory
	leaf    string // when the path itself is one: why
	why     string // why inside is one
	dotGit  bool   // the path is a directory holding a .git entry
	missing string // the first component that does not exist ("" when all do)
	id      FileID // the path's identity, when it exists
}

// isDotGit is Git's own name for its directory, in any case: on a case-insensitive
// filesystem .GIT is the same directory.
func isDotGit(name string) bool { return strings.EqualFold(name, ".git") }

// gitShape are the entries that, beside HEAD, make a directory a Git directory to
// Git (setup.c's is_git_directory asks for objects/ and refs/, found through
// commondir in a linked worktree's gitdir). Any one of them is enough here: the
// sandbox could add the others.
var gitShape = []string{"objects", "refs", "commondir"}

// Grants are the writable grants of p that policy checks (checkGrants) and the
// session core checks again before launch: the repository unless --read-only,
// --add-dir, --keep, and the cache directory that --disk-tmp's session directory
// lies in. They are computed from p's fields, so that none is left out.
func (p *Policy) Grants() []Grant {
	var gs []Grant
	if !p.ReadOnly {
		gs = append(gs, Grant{What: "repo", Path: p.Repo, Kind: GrantTree})
	}
	for _, d := range p.AddDirs {
		gs = append(gs, Grant{What: "--add-dir", Path: d, Kind: GrantTree})
	}
	for _, k := range p.Keep {
		gs = append(gs, Grant{What: k.From, Path: k.Path, Kind: GrantPlain})
	}
	if p.DiskTmp {
		gs = append(gs, Grant{What: "--disk-tmp", Path: p.CacheDir, Kind: GrantTree})
	}
	return gs
}

// checkGrants checks every grant of p in one place, last in New; a refusal names
// the path as the user gave it.
func (p *Policy) checkGrants(opts Options) error {
	adds := 0 // Grants lists the added directories in opts.AddDir's order
	for _, g := range p.Grants() {
		arg := g.Path
		switch {
		case g.What == "repo" && opts.Repo != "":
			arg = opts.Repo
		case g.What == "--add-dir":
			arg = opts.AddDir[adds]
			adds++
		}
		if _, err := CheckGrant(g.What, arg, g.Path, g.Kind); err != nil {
			return err
		}
	}
	return nil
}
