package main

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentbox/agentbox/policy"
)

// missingRepoFirst explains "agentbox exec ~/nope -- true": a first argument that
// looks like a path, is not there, and is followed by "--" was meant as the
// repository (repoFirst), not as the command.
func missingRepoFirst(args []string) (string, bool) {
	if len(args) < 2 || args[1] != "--" || !strings.ContainsRune(args[0], '/') {
		return "", false
	}
	if _, err := os.Lstat(args[0]); !errors.Is(err, fs.ErrNotExist) {
		return "", false
	}
	return "exec: repository " + args[0] + ": no such directory (agentbox exec DIR -- COMMAND runs COMMAND in the repository DIR)", true
}

// noGitNote says, when no repository was named and none holds the working
// directory, that the working directory itself is the writable one.
func noGitNote(opts *policy.Options, p *policy.Policy) string {
	if opts.Repo != "" {
		return ""
	}
	if _, err := os.Lstat(filepath.Join(p.Repo, ".git")); err == nil {
		return ""
	}
	return "no Git repository here: " + p.Repo + " (the current directory) is the writable one; pass --repo DIR to choose another"
}
