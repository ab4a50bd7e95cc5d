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
// be created in is another user's.
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
			return nil
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
