package gitguard

import (
	"path/filepath"
	"strings"
)

// The two pointer files by which Git finds its directories, parsed once for the
// protection, the snapshot and the audit alike, and as Git parses them: were they to
// disagree with Git, a pointer could send Git to a directory agentbox never looked at.

// ParseGitFile reads a ".git" file as Git's read_gitfile does: "gitdir: " and the
// path, with trailing CR and LF dropped; spaces are part of the path.
func ParseGitFile(data []byte) (string, bool) {
	s, ok := strings.CutPrefix(string(data), "gitdir: ")
	if !ok {
		return "", false
	}
	s = strings.TrimRight(s, "\r\n")
	return s, s != ""
}

// ParseCommonDir reads gitdir's commondir file as Git does: the path, with trailing
// CR and LF dropped, relative to gitdir unless absolute.
func ParseCommonDir(gitdir string, data []byte) (string, bool) {
	s := strings.TrimRight(string(data), "\r\n")
	if s == "" {
		return "", false
	}
	if !filepath.IsAbs(s) {
		s = filepath.Join(gitdir, s)
	}
	return s, true
}
