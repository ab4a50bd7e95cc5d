// Package pushguard makes the script that stands in for the host's Git inside the
// sandbox and refuses pushes (docs/promises.md P9): where the real Git is found, how the
// script is staged or cached, and what it refuses. What is mounted where is the
// plan's (mounts); this package only provides the files.
package pushguard

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Inside the sandbox, the host's Git executable is
// shadowed by a small POSIX shell script (bound read-only over it) that refuses
// `git push`, `git send-pack` and `git http-push` — directly, through global options,
// through aliases from any config, through `!` aliases whose shell text runs them,
// and through the dashed helpers of Git's exec path — and runs every other command
// with the real Git, which stays reachable only below GuardRunDir. It is a guard
// against mistakes, not a firewall: a determined program can speak Git's protocol
// itself; agentbox --offline removes the network.
//
// The real Git's directory, not the file, is bound at GuardRunDir, onto a small tmpfs
// mounted there first: the native backend creates mount points for tmpfs mounts but
// binds read-only only onto what exists, and a directory holds nothing the sandbox
// could not read already at its own path.
//
// The script is staged in a fresh mode-0700 directory below the host's /tmp (not
// $TMPDIR, which the caller controls), bound read-only, and removed when the
// launcher exits. The sandbox gets its own /tmp before anything else is bound, so
// the staging directory is unreachable from inside.

// GuardRunDir is where, inside the sandbox, the guard finds the real Git: the
// directory that holds it on the host is bound read-only here (HostGit.Real). /run is
// a private tmpfs there, so nothing on the host is at this path.
const GuardRunDir = "/run/agentbox/pushguard"

// GuardStagePrefix starts the name of every staging directory below /tmp, followed
// by the launcher's PID and a random suffix (agentbox-guard-PID-XXXX), so that a
// cleanup of stale ones can tell whose they are.
const GuardStagePrefix = "agentbox-guard-"

// guardName is the staged script's file name.
const guardName = "git"

// refusedCommands are the Git commands that send objects to a remote.
var refusedCommands = []string{"push", "send-pack", "http-push"}

// HostGit is the host's Git as the push guard shadows it.
type HostGit struct {
	// Git is the canonical path of the git that PATH finds (`command -v git`, with
	// symlinks resolved): the real Git the guard runs.
	Git string
	// ExecPath is Git's exec path (`git --exec-path`), "" when none was found.
	ExecPath string
	// Shadow lists the canonical regular files the guard is bound over: Git itself,
	// the exec path's own git, and the files its git-push, git-send-pack and
	// git-http-push helpers resolve to. No duplicates, Git first.
	Shadow []string
}

// Real is the path of the real Git inside the sandbox, below GuardRunDir.
func (h HostGit) Real() string { return filepath.Join(GuardRunDir, filepath.Base(h.Git)) }

// FindHostGit locates the git that PATH finds and what the guard must shadow. found
// is false when there is no git on PATH: there is nothing to guard.
//
// The exec path is taken from $GIT_EXEC_PATH when set, else from the two layouts Git
// installs (PREFIX/libexec/git-core, and Debian's PREFIX/lib/git-core), PREFIX being
// the parent of git's directory; this avoids running Git at every launch.
func FindHostGit(getenv func(string) string) (h HostGit, found bool, err error) {
	path, err := exec.LookPath("git")
	if errors.Is(err, exec.ErrDot) {
		// Found through a relative PATH entry: the sandboxed command, with the same
		// PATH and working directory, finds that git too.
		path, err = filepath.Abs(path)
	}
	if err != nil {
		return HostGit{}, false, nil
	}
	git, err := filepath.EvalSymlinks(path)
	if err != nil {
		return HostGit{}, false, fmt.Errorf("push guard: resolve %s: %w", path, err)
	}
	if git, err = filepath.Abs(git); err != nil {
		return HostGit{}, false, fmt.Errorf("push guard: resolve %s: %w", path, err)
	}
	if !isFile(git) {
		return HostGit{}, false, fmt.Errorf("push guard: %s (for %s) is not a regular file", git, path)
	}
	h = HostGit{Git: git, Shadow: []string{git}}
	h.ExecPath = findExecPath(git, getenv("GIT_EXEC_PATH"))
	if h.ExecPath == "" {
		return h, true, nil
	}
	for _, name := range []string{"git", "git-push", "git-send-pack", "git-http-push"} {
		p, err := filepath.EvalSymlinks(filepath.Join(h.ExecPath, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return HostGit{}, false, fmt.Errorf("push guard: resolve %s: %w", filepath.Join(h.ExecPath, name), err)
		}
		if isFile(p) && !contains(h.Shadow, p) {
			h.Shadow = append(h.Shadow, p)
		}
	}
	return h, true, nil
}

// findExecPath returns the canonical exec path of the git at canonical path git.
func findExecPath(git, env string) string {
	cands := []string{env}
	if env == "" {
		prefix := filepath.Dir(filepath.Dir(git))
		cands = []string{filepath.Join(prefix, "libexec", "git-core"), filepath.Join(prefix, "lib", "git-core")}
	}
	for _, c := range cands {
		if c == "" || !filepath.IsAbs(c) {
			continue
		}
		d, err := filepath.EvalSymlinks(c)
		if err != nil {
			continue
		}
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			return d
		}
	}
	return ""
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// StagedGuard is a staging directory holding the guard script.
type StagedGuard struct {
	Dir   string // /tmp/agentbox-guard-PID-XXXX, mode 0700
	Guard string // Dir/git, mode 0755: bound over each of HostGit.Shadow
}

// StageGuard writes the guard script for h into a fresh mode-0700 directory below the
// host's /tmp. The caller removes it with Remove when the launcher exits; on error
// nothing is left behind.
func StageGuard(h HostGit) (*StagedGuard, error) {
	dir, err := os.MkdirTemp("/tmp", fmt.Sprintf("%s%d-", GuardStagePrefix, os.Getpid()))
	if err != nil {
		return nil, fmt.Errorf("push guard: create staging directory in /tmp: %w", err)
	}
	s := &StagedGuard{Dir: dir, Guard: filepath.Join(dir, guardName)}
	if err := s.write(h); err != nil {
		s.Remove()
		return nil, err
	}
	return s, nil
}

func (s *StagedGuard) write(h HostGit) error {
	// MkdirTemp creates 0700; say so explicitly rather than rely on it.
	if err := os.Chmod(s.Dir, 0o700); err != nil {
		return fmt.Errorf("push guard: chmod %s: %w", s.Dir, err)
	}
	f, err := os.OpenFile(s.Guard, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o700)
	if err != nil {
		return fmt.Errorf("push guard: create %s: %w", s.Guard, err)
	}
	_, err = f.WriteString(GuardScript(h.Real()))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(s.Guard, 0o755) // the umask must not make it unreadable
	}
	if err != nil {
		return fmt.Errorf("push guard: write %s: %w", s.Guard, err)
	}
	return nil
}

// Remove deletes the staging directory. It is safe to call on nil.
func (s *StagedGuard) Remove() error {
	if s == nil || s.Dir == "" {
		return nil
	}
	if err := os.RemoveAll(s.Dir); err != nil {
		return fmt.Errorf("push guard: remove %s: %w", s.Dir, err)
	}
	return nil
}

// GuardScript returns the guard: a POSIX shell script that runs the real Git at real
// (inside the sandbox) unless the command would push. It decides as Git does:
//
//   - invoked as a dashed helper (git-push, git-send-pack, git-http-push through the
//     exec path), it refuses; other dashed names run as `git NAME`;
//   - Git's global options (-C, -c, --git-dir, --no-pager …) are skipped to find the
//     command;
//   - a command Git runs itself (a builtin or a git-NAME program) is never an alias;
//     anything else is looked up as alias.NAME by the real Git with the same global
//     options (so `git -c alias.p=push p` and every config file count), and followed
//     through chains of aliases;
//   - a `!` alias is refused when its shell text runs git push or send-pack (its shell
//     would meet this guard anyway, as Git puts the exec path first in PATH).
func GuardScript(real string) string {
	// One pass per marker: a strings.Replacer's set-up cost more than the passes. The
	// path goes in last, so that nothing in it is taken for a marker.
	s := guardTemplate
	for _, r := range [][2]string{
		{"@REFUSED@", strings.Join(refusedCommands, "|")},
		{"@DASHED@", "git-" + strings.Join(refusedCommands, "|git-")},
		{"@BUILTINS@", strings.Join(neverAliased, "|")},
		{"@ARGOPTS@", strings.Join(globalOptsWithArg, "|")},
		{"@REAL@", shellQuote(real)},
	} {
		s = strings.ReplaceAll(s, r[0], r[1])
	}
	return s
}

// globalOptsWithArg are Git's global options that take the next word as their value
// (git.c, handle_options).
var globalOptsWithArg = []string{"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--super-prefix", "--config-env", "--attr-source"}

// neverAliased are commands every Git since 2.23 runs as builtins, which makes an
// alias of the same name dead: the guard runs them without an alias lookup. It only
// saves time; a command missing here is looked up, which is also correct.
var neverAliased = []string{
	"add", "am", "apply", "archive", "bisect--helper", "blame", "branch", "bundle",
	"cat-file", "check-attr", "check-ignore", "check-ref-format", "checkout",
	"checkout-index", "cherry", "cherry-pick", "clean", "clone", "commit",
	"commit-graph", "commit-tree", "config", "count-objects", "credential", "describe",
	"diff", "diff-files", "diff-index", "diff-tree", "fetch", "fetch-pack",
	"for-each-ref", "format-patch", "fsck", "gc", "grep", "hash-object", "help",
	"index-pack", "init", "log", "ls-files", "ls-remote", "ls-tree", "merge",
	"merge-base", "merge-file", "mktree", "mv", "name-rev", "notes", "pack-objects",
	"pack-refs", "prune", "prune-packed", "pull", "range-diff", "read-tree", "rebase",
	"receive-pack", "reflog", "remote", "repack", "replace", "rerere", "reset",
	"restore", "rev-list", "rev-parse", "revert", "rm", "shortlog", "show",
	"show-branch", "show-ref", "stash", "status", "stripspace", "submodule--helper",
	"switch", "symbolic-ref", "tag", "unpack-objects", "update-index", "update-ref",
	"upload-pack", "var", "verify-pack", "version", "worktree", "write-tree",
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// guardTemplate is the script; @NAME@ are replaced by GuardScript. It must run under
// any POSIX sh (dash, busybox), start fast, and change nothing for commands it lets
// through: they are exec'd with their arguments and environment untouched.
const guardTemplate = `#!/bin/sh
# agentbox push guard (P9): refuses git push and git send-pack inside the sandbox,
# aliases included; every other command runs with the real Git, unchanged.
# A guard against mistakes, not a firewall (agentbox exec --offline cuts the network).
real=@REAL@

refuse() {
	printf 'agentbox: %s refused: pushing is off inside this sandbox (run agentbox exec --allow-git-push to allow it)\n' "$1" >&2
	exit 1
}

# is_command NAME: Git runs NAME itself (a builtin or a git-NAME program on its exec
# path or PATH), so an alias of that name is never used.
is_command() {
	"$real" --list-cmds=builtins 2>/dev/null | grep -qxF -- "$1" && return 0
	PATH="$("$real" --exec-path 2>/dev/null):$PATH" command -v "git-$1" >/dev/null 2>&1
}

# alias_of NAME N ARGS...: alias.NAME as the real Git sees it with the first N of
# ARGS (the global options) in effect; fails when there is none.
alias_of() {
	name=$1 keep=$2
	shift 2
	i=0 total=$#
	while [ "$i" -lt "$total" ]; do
		if [ "$i" -lt "$keep" ]; then set -- "$@" "$1"; fi
		shift
		i=$((i + 1))
	done
	"$real" "$@" config --get "alias.$name" 2>/dev/null
}

# alias_command VALUE: the command an alias expands to (its first word that is not a
# global option), with surrounding quotes removed.
alias_command() {
	set -f
	set -- $1
	skip=
	for w do
		w=${w#[\"\']}
		w=${w%[\"\']}
		if [ -n "$skip" ]; then skip=; continue; fi
		case $w in
		@ARGOPTS@) skip=1 ;;
		-*) ;;
		*) printf '%s\n' "$w"; return 0 ;;
		esac
	done
	return 1
}

# shell_pushes TEXT: the shell text of a ! alias runs git push, git send-pack or
# their dashed helpers (a word git followed, in the same simple command, by push).
shell_pushes() {
	printf '%s\n' "$1" | awk '
	{
		n = split($0, cmds, /[;&|(){}` + "`" + `]/)
		for (i = 1; i <= n; i++) {
			m = split(cmds[i], w, /[ \t]+/)
			git = 0
			for (j = 1; j <= m; j++) {
				b = w[j]
				gsub(/["\047\\]/, "", b)
				sub(/.*\//, "", b)
				if (b ~ /^git-(@REFUSED@)$/) found = 1
				else if (b == "git") git = 1
				else if (git && b ~ /^(@REFUSED@)$/) found = 1
			}
		}
	}
	END { exit !found }'
}

self=${0##*/}
case $self in
git) ;;
@DASHED@) refuse "$self" ;;
git-*) exec "$real" "${self#git-}" "$@" ;;
esac

# Skip the global options to find the command; n counts the option words.
n=0 skip= cmd=
for a do
	if [ -n "$skip" ]; then
		skip=
		n=$((n + 1))
		continue
	fi
	case $a in
	@ARGOPTS@) skip=1 ;;
	-h|--help|-v|--version|--exec-path|--html-path|--man-path|--info-path) exec "$real" "$@" ;;
	-*) ;;
	*) cmd=$a; break ;;
	esac
	n=$((n + 1))
done
[ -n "$cmd" ] || exec "$real" "$@"

# .git/config is read-only inside (P7): Git's write of it fails with "Device or
# resource busy", which reads like a bug; say why after Git's own error. These
# commands are builtins that never push, so they skip the alias walk below.
config_hint() {
	printf 'agentbox: .git/config is read-only inside the sandbox (Git would run what it says as you, on the host): run this git command on the host, outside agentbox\n' >&2
}
writes_config=
case $cmd in
config)
	for a do
		case $a in --global|--system|--file|-f|--blob|--file=*|--blob=*) exec "$real" "$@" ;; esac
	done
	"$real" "$@"
	rc=$?
	# git config's status 4: it could not write the config file.
	[ "$rc" -ne 4 ] || config_hint
	exit "$rc"
	;;
remote|branch|submodule)
	for a do
		case $a in
		add|rename|rm|remove|set-url|set-head|set-branches|init|sync|deinit|set-branch) writes_config=1 ;;
		-u|--set-upstream-to|--set-upstream-to=*|--unset-upstream|-m|-M|-c|-C|-d|-D|--delete|--move|--copy|--edit-description|-t|--track|--track=*) writes_config=1 ;;
		esac
	done
	;;
esac
if [ -n "$writes_config" ] && err=$(mktemp "${TMPDIR:-/tmp}/agentbox-git.XXXXXX" 2>/dev/null); then
	"$real" "$@" 2>"$err"
	rc=$?
	cat "$err" >&2
	if [ "$rc" -ne 0 ] && grep -q 'config.*Device or resource busy' "$err"; then config_hint; fi
	rm -f "$err"
	exit "$rc"
fi

# Follow aliases as Git does; chain holds the alias names on the way.
name=$cmd chain= depth=0
while :; do
	case $name in
	@REFUSED@) ;;
	@BUILTINS@) exec "$real" "$@" ;;
	*)
		[ "$depth" -lt 16 ] || exec "$real" "$@"
		value=$(alias_of "$name" "$n" "$@") || exec "$real" "$@"
		chain="$chain $name"
		depth=$((depth + 1))
		case $value in
		!*)
			shell_pushes "${value#!}" || exec "$real" "$@"
			;;
		*)
			name=$(alias_command "$value") || exec "$real" "$@"
			continue
			;;
		esac
		;;
	esac
	break
done

# A push. When it came through aliases, Git would still run a command of an alias's
# name instead of the alias: then this is not a push after all.
for a in $chain; do
	if is_command "$a"; then exec "$real" "$@"; fi
done
if [ -n "$chain" ]; then
	refuse "git $cmd (an alias that pushes)"
fi
refuse "git $cmd"
`

// CacheGuard keeps the guard script for h in dir, the user's cache (created mode
// 0700), under a name derived from its content, and returns its canonical path. It is
// what staging costs every launch — a directory, a file, a claim, and their removal —
// done once: later launches read the file back and compare. allowed is asked about the
// canonical dir before anything is written: a file the sandbox could write (a cache
// inside a writable bind) would be a guard it could rewrite, so the caller stages
// below /tmp instead.
//
// The sandbox cannot change the file: it sees the user's cache only through the HOME
// overlay, whose writes never reach the host file, and the bind is read-only.
func CacheGuard(h HostGit, dir string, allowed func(canonDir string) bool) (string, error) {
	script := GuardScript(h.Real())
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("push guard cache: %w", err)
	}
	canon, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", fmt.Errorf("push guard cache: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(canon, &st); err != nil {
		return "", fmt.Errorf("push guard cache: %w", err)
	}
	if int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0 {
		return "", fmt.Errorf("push guard cache: %s is not this user's alone", canon)
	}
	if !allowed(canon) {
		return "", fmt.Errorf("push guard cache: %s is writable from the sandbox", canon)
	}
	if !searchable(canon) {
		return "", fmt.Errorf("push guard cache: %s is out of the sandbox's reach", canon)
	}
	path := filepath.Join(canon, guardCacheName(script))
	if cachedGuardIs(path, script) {
		return path, nil
	}
	f, err := os.CreateTemp(canon, ".git-*")
	if err != nil {
		return "", fmt.Errorf("push guard cache: %w", err)
	}
	_, err = f.WriteString(script)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o755)
	}
	if err == nil {
		err = publishGuard(f.Name(), path, script)
	}
	os.Remove(f.Name())
	if err != nil {
		return "", fmt.Errorf("push guard cache: %w", err)
	}
	return path, nil
}

// publishGuard puts the written file tmp at path without replacing a good one. The
// name holds the script's hash, so a file already there holds the same script — put
// there by a session launched at the same moment, which may have captured it for
// its own bind already: replacing it would unlink what that session is about to
// mount (move_mount, or bwrap's /proc/self/fd/N, then fail with ENOENT). Only a file
// that is not a good guard (changed, wrong mode or owner) is replaced, atomically.
func publishGuard(tmp, path, script string) error {
	err := os.Link(tmp, path)
	if errors.Is(err, fs.ErrExist) {
		if cachedGuardIs(path, script) {
			return nil
		}
		return os.Rename(tmp, path)
	}
	return err
}

// searchable reports whether dir and each directory above it let this user through by
// their permission bits alone, as the init needs them to: it takes the bind's source
// with this user's ids, and its capabilities count only for files whose owner is
// mapped in its user namespace (root launching into another user's HOME is not).
func searchable(dir string) bool {
	uid, gid := uint32(os.Geteuid()), uint32(os.Getegid())
	for {
		var st unix.Stat_t
		if unix.Stat(dir, &st) != nil {
			return false
		}
		ok := st.Mode&0o001 != 0 || (st.Uid == uid && st.Mode&0o100 != 0) || (st.Gid == gid && st.Mode&0o010 != 0)
		if !ok {
			return false
		}
		if dir == "/" {
			return true
		}
		dir = filepath.Dir(dir)
	}
}

// cachedGuardIs reports whether path is the user's own regular file, writable by
// nobody else, mode 0755, holding exactly script.
func cachedGuardIs(path, script string) bool {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Mode&0o7777 != 0o755 ||
		int(st.Uid) != os.Geteuid() || st.Size != int64(len(script)) {
		return false
	}
	buf := make([]byte, len(script)+1) // one more: a file that grew is not the script
	n := 0
	for n < len(buf) {
		m, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return false
		}
		if m == 0 {
			break
		}
		n += m
	}
	return n == len(script) && string(buf[:n]) == script
}

// GuardCacheName is the name CacheGuard gives h's guard in its directory.
func GuardCacheName(h HostGit) string { return guardCacheName(GuardScript(h.Real())) }

func guardCacheName(script string) string {
	sum := sha256.Sum256([]byte(script))
	return "git-" + hex.EncodeToString(sum[:8])
}

// isFile: path is a regular file itself, not through a symlink.
func isFile(path string) bool {
	fi, err := os.Lstat(path)
	return err == nil && fi.Mode().IsRegular()
}
