// Package grantledger keeps the list of host directories that sessions were given
// writable (the repository, --add-dir, kept paths, a linked worktree's metadata), so
// that agentbox's host side never runs a program from one of them later: a session
// of last week that had --add-dir ~/tools/bin could have put a git there, and
// ~/tools/bin on PATH today would make `agentbox log` run it as the operator
// (internal/hostpath.LookPath, the Go API's InitBinary).
//
// The ledger is a file in agentbox's state directory, which no session can write
// (policy refuses a grant in or around it; inside, HOME is an overlay). It only ever
// makes lookups stricter: an entry is a directory skipped, by its path and by its
// identity (device, inode, birth time: a directory renamed, bind-mounted or reached
// through a link is still the one given), so a damaged or foreign
// ledger refuses instead of being ignored. It is written before a session's command
// starts, and never shrinks by itself: the operator removes a line after checking
// the directory.
package grantledger

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/agentbox/agentbox/internal/termsafe"
)

// FileName is the ledger's name in the state directory: one quoted path a line,
// the format every agentbox since the ledger reads.
const FileName = "granted-dirs"

// IdentityFileName is the file beside it that holds each grant's identity, a line
// "PATH" DEV INO BIRTH each. It is a file of its own so that an agentbox (or a Go
// program built with one) from before identities were kept, which refuses a
// ledger line it cannot parse, still reads the paths: the same user's two
// versions keep working side by side.
const IdentityFileName = "granted-ids"

// StateDir is agentbox's state directory as policy computes it
// (${XDG_STATE_HOME:-$HOME/.local/state}/agentbox); "" when neither is absolute.
func StateDir(xdgStateHome, home string) string {
	if filepath.IsAbs(xdgStateHome) {
		return filepath.Join(xdgStateHome, "agentbox")
	}
	if filepath.IsAbs(home) {
		return filepath.Join(home, ".local/state", "agentbox")
	}
	return ""
}

// StateDirFromEnv is StateDir of this process's environment: where the launches of
// the operator's agentbox and Go programs (which take both variables from the
// environment) keep their ledger.
func StateDirFromEnv() string {
	return StateDir(os.Getenv("XDG_STATE_HOME"), os.Getenv("HOME"))
}

// Path is the ledger's path in stateDir.
func Path(stateDir string) string { return filepath.Join(stateDir, FileName) }

// IdentityPath is the path of the ledger's identities in stateDir.
func IdentityPath(stateDir string) string { return filepath.Join(stateDir, IdentityFileName) }

// Entry is one directory a session was given writable.
type Entry struct {
	Dir string // absolute and clean
	// ID is the directory's identity when it was recorded; zero on a line written
	// before identities were kept.
	ID Identity
}

// Identity tells a directory apart from every other on the host whatever its name:
// st_dev and st_ino, which a rename and a bind mount keep, and the birth time
// (statx) where the file system keeps one, so that an inode number reused by a
// directory made after the grant's was deleted is not taken for it.
type Identity struct {
	Dev, Ino uint64
	Birth    uint64 // nanoseconds since the epoch; 0 where the file system keeps none
}

// Known reports whether the identity was recorded (no file has inode 0).
func (id Identity) Known() bool { return id.Ino != 0 }

// Dirs are the entries' directories.
func Dirs(entries []Entry) []string {
	dirs := make([]string, 0, len(entries))
	for _, e := range entries {
		dirs = append(dirs, e.Dir)
	}
	return dirs
}

// Error is a ledger that cannot be taken at its word.
type Error struct {
	Path   string
	Reason string
}

func (e *Error) Error() string {
	return fmt.Sprintf("the list of directories sessions could write, %s, %s", termsafe.Quote(e.Path), e.Reason)
}
