package policy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

// Who owns what agentbox writes (issue 35). Under sudo -E, root keeps the user's
// HOME and so the user's state and cache directories: what root wrote there the user's
// agentbox gc could not remove. Under plain sudo, root's command runs without
// capabilities on a repository the user owns, and every write fails with a bare
// "Permission denied".

// CheckOwnDir refuses agentbox's state or cache directory (what names it) when
// another user owns it, or, for root, when it is missing and the directory it would
// be created in is another user's; then when others could replace it (CheckPrivate).
func CheckOwnDir(what, dir string, euid int) error {
	if dir == "" {
		return nil
	}
	cur := dir
	for {
		fi, err := os.Lstat(cur)
		if errors.Is(err, fs.ErrNotExist) && cur != "/" {
			cur = filepath.Dir(cur)
			continue
		}
		if err != nil {
			return nil // the launch reports what it cannot create
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok || int(st.Uid) == euid || (cur != dir && euid != 0) {
			return CheckPrivate(what, dir, euid)
		}
		owner := userName(st.Uid)
		where := quote(dir) + " is owned by " + owner
		if cur != dir {
			where = quote(dir) + " would be created in " + quote(cur) + ", owned by " + owner
		}
		fix := "set XDG_STATE_HOME to a directory of your own"
		if what == "cache directory" {
			fix = "set XDG_CACHE_HOME to a directory of your own"
		}
		if euid == 0 {
			fix = "run agentbox as " + loginName(st.Uid) + ", without sudo, or as root with root's own HOME (sudo without -E)"
		}
		return &Error{What: what, Reason: fmt.Sprintf("%s, not by %s, who runs agentbox, and agentbox never writes into another user's; %s", where, userName(uint32(euid)), fix)}
	}
}

// CheckPrivate refuses a path agentbox keeps its own state, cache or policy at (what
// names it) when a user other than euid and root could replace what lies there: when
// it, or a directory on its way from /, is another user's or can be written by
// others. Who can write a directory can rename any entry in it (a directory moved
// within its parent needs no write access to itself): another user of the host who
// can write ~/.local/state can move ~/.local/state/agentbox aside, and the next
// launch, seeing no pending journal, takes a killed session's plants for the user's
// own and never audits them. ssh refuses a ~/.ssh so placed, for the same reason.
//
// A directory writable by others with the sticky bit (/tmp) lets nobody but its
// owner and root move another's entry, and passes. A group-writable one passes when
// the group is the user's private group (its primary group, named as the user is:
// umask 002 with user private groups makes every directory so). Both the path as
// given and the one its symlinks lead to are checked: whoever can write the
// directory holding a symlink can point it elsewhere. A missing tail is checked from
// its nearest existing ancestor, which must be the user's alone, sticky or not.
// Errors reading the path pass: the launch reports what it cannot create.
func CheckPrivate(what, path string, euid int) error {
	if path == "" || !filepath.IsAbs(path) {
		return nil
	}
	path = filepath.Clean(path)
	existing := path
	for {
		if _, err := os.Lstat(existing); err == nil || existing == "/" {
			break
		}
		existing = filepath.Dir(existing)
	}
	// A missing tail is made in existing later, by name: there the sticky bit does
	// not help, as whoever can write existing can make that name first.
	creates := ""
	if existing != path {
		creates = existing
	}
	if err := checkChain(what, path, path, creates, euid); err != nil {
		return err
	}
	resolved, err := filepath.EvalSymlinks(existing)
	if err != nil || resolved == existing {
		return nil
	}
	if creates != "" {
		creates = resolved
	}
	return checkChain(what, path, resolved, creates, euid)
}

// checkChain walks from dir up to / and refuses the first directory someone other
// than euid and root could change, for CheckPrivate; creates is the directory the
// missing tail of path will be made in ("" when none is missing).
func checkChain(what, path, dir, creates string, euid int) error {
	for cur := dir; ; cur = filepath.Dir(cur) {
		fi, err := os.Lstat(cur)
		if err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && fi.Mode()&fs.ModeSymlink == 0 {
				if why := sharedBy(st, cur == path || cur == creates, euid); why != "" {
					where := quote(cur)
					if cur == path {
						where = "it"
					}
					return &Error{What: what, Path: path, Reason: fmt.Sprintf("%s %s, who could swap what agentbox keeps there for something of theirs; %s",
						where, why, privateFix(what, cur, st, euid))}
				}
			}
		}
		if cur == "/" {
			return nil
		}
	}
}

// sharedBy says who besides euid and root can change the directory (or, for the
// path itself, the file) st describes: "" when nobody. The sticky bit counts unless
// noSticky: for the path itself, and for the directory its missing tail is made in.
func sharedBy(st *syscall.Stat_t, noSticky bool, euid int) string {
	if int(st.Uid) != euid && st.Uid != 0 {
		return "is owned by " + userName(st.Uid)
	}
	sticky := st.Mode&syscall.S_IFMT == syscall.S_IFDIR && st.Mode&syscall.S_ISVTX != 0 && !noSticky
	switch {
	case st.Mode&0o002 != 0 && !sticky:
		return fmt.Sprintf("can be written by every user (mode %04o)", st.Mode&0o7777)
	case st.Mode&0o020 != 0 && !sticky && !privateGroup(st.Gid, euid):
		return fmt.Sprintf("can be written by the members of group %s (mode %04o)", groupName(st.Gid), st.Mode&0o7777)
	}
	return ""
}

// privateFix is what to do about a shared directory on the way to what's path.
func privateFix(what, dir string, st *syscall.Stat_t, euid int) string {
	env := "XDG_STATE_HOME"
	switch what {
	case "cache directory":
		env = "XDG_CACHE_HOME"
	case "config file":
		env = "XDG_CONFIG_HOME"
	}
	if int(st.Uid) == euid {
		return "run chmod go-w " + quote(dir) + ", or set " + env + " to a directory only you can write"
	}
	return "set " + env + " to a directory only you can write"
}

// privateGroup reports whether gid is euid's user private group: its primary group,
// with the user's name.
func privateGroup(gid uint32, euid int) bool {
	u, err := user.LookupId(strconv.Itoa(euid))
	if err != nil || u.Gid != strconv.FormatUint(uint64(gid), 10) {
		return false
	}
	g, err := user.LookupGroupId(u.Gid)
	return err == nil && g.Name == u.Username
}

// groupName is "NAME (gid N)", or "gid N" for an unknown group.
func groupName(gid uint32) string {
	id := strconv.FormatUint(uint64(gid), 10)
	if g, err := user.LookupGroupId(id); err == nil {
		return g.Name + " (gid " + id + ")"
	}
	return "gid " + id
}

// userName is "NAME (uid N)", or "uid N" for an unknown user.
func userName(uid uint32) string {
	id := strconv.FormatUint(uint64(uid), 10)
	if u, err := user.LookupId(id); err == nil {
		return u.Username + " (uid " + id + ")"
	}
	return "uid " + id
}

// loginName is the user's name, or "uid N" for an unknown user.
func loginName(uid uint32) string {
	id := strconv.FormatUint(uint64(uid), 10)
	if u, err := user.LookupId(id); err == nil {
		return u.Username
	}
	return "uid " + id
}

// CheckRepoOwner refuses a writable session of a user other than root on a
// repository another user owns (--read-only passes). Pending audits live in each
// user's own state directory: a session of the owner's, running or killed before
// its audit, is invisible here, so this launch would take its plants for the
// baseline, the last state no sandbox touched, and vouch for them; and the
// owner's launches cannot see this one's. Git refuses such a repository as well
// (safe.directory), so the session's own Git fails in it anyway. Root on a user's
// repository gets RootNotice instead: its command has no capabilities there.
func CheckRepoOwner(repo string, euid int) error {
	if euid == 0 {
		return nil
	}
	fi, err := os.Stat(repo)
	if err != nil {
		return nil
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || int(st.Uid) == euid || st.Uid == 0 {
		return nil
	}
	return &Error{What: "repo", Path: repo, Reason: fmt.Sprintf("is owned by %s, not by %s: agentbox cannot see the pending audits of that user's sessions, so it could take their plants for that user's own work (Git refuses such a repository too); run agentbox as %s, or pass --read-only",
		userName(st.Uid), userName(uint32(euid)), loginName(st.Uid))}
}

// RootNotice is the line a launch by root prints when the writable repository is
// another user's: the command has no capabilities, so it cannot write what that user
// owns. "" otherwise.
func (p *Policy) RootNotice() string {
	if os.Geteuid() != 0 || p.ReadOnly {
		return ""
	}
	fi, err := os.Stat(p.Repo)
	if err != nil {
		return ""
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st.Uid == 0 {
		return ""
	}
	return "running as root on " + quote(p.Repo) + ", owned by " + userName(st.Uid) +
		": the command has no capabilities and cannot write what " + loginName(st.Uid) + " owns; run agentbox as " + loginName(st.Uid) + ", without sudo"
}
