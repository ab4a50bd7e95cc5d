package shadow

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/safepath"
	"github.com/agentbox/agentbox/internal/treewalk"
)

// What the record cannot see is named (docs/promises.md P13). A record that shows
// "+0 ~0 -0" must mean nothing changed, yet Git stores no FIFO, socket or device,
// nothing below a directory named .git, nothing in a nested repository's work tree
// but its commit, no path it refuses (".GIT", "git~1"), no file it cannot read, and
// nothing .gitignore matches. So after the end's staging the recorder looks at what
// changed during the session — the end walk's entries with a ctime since the launch
// walk's clock, and, below each nested repository the walk does not list, a
// bounded walk of its own — and names each that the index does not hold, with the
// reason. Ignored files are counted apart: leaving them out is the repository's
// choice, but a reviewer is still told they changed.

// unseen is what the end's staging could not store of what changed since since
// (a ctime), and the ignored files among it; notes say what could not be checked.
func (s *Store) unseen(w *treewalk.Walk, since int64) (out []Skipped, ignored []string, notes []string) {
	repoFd, err := unix.Open(s.Repo, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, nil // the repository is gone: the record says so
	}
	defer unix.Close(repoFd)
	named := make(map[string]bool, len(s.skipped))
	for _, sk := range s.skipped {
		named[sk.Path] = true
	}
	want := map[string]bool{}
	var nested []string
	for _, e := range w.Entries {
		switch {
		case e.Nested:
			nested = append(nested, e.Rel)
			want[e.Rel] = true
		case e.Ctime < since || e.IsDir() || named[e.Rel]:
		case special(e.Mode) != "":
			out = append(out, Skipped{Path: shortPath(e.Rel), Reason: special(e.Mode) + ": Git stores no FIFOs, sockets or devices"})
		case len(want) >= maxUnseenIn:
			notes = append(notes, fmt.Sprintf("more than %d paths changed: those past it not checked against the record", maxUnseenIn))
			want = nil
		default:
			want[e.Rel] = true
		}
		if want == nil {
			break
		}
	}
	// A staging in place stored every path it was given (inplace.go), and there is
	// no nested repository then (those are Git's to stage): the index need not be
	// read to tell.
	var held map[string]indexEntry
	inPlace := s.delta.from != ""
	if len(want) > 0 && !inPlace {
		held, err = readIndexPaths(filepath.Join(s.Dir, "index"), want)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return out, nil, append(notes, "what Git could not store is not named: the index cannot be read: "+err.Error())
		}
	}
	// In the walk's order, looked up only for what the loop above may have
	// wanted: a staging in place wanted nothing here, and the others changed
	// since since (not a map lookup for each of a big tree's entries).
	var missing []string
	if !inPlace && len(want) > 0 {
		for _, e := range w.Entries {
			if !e.Nested && e.Ctime >= since && want[e.Rel] {
				if _, ok := held[e.Rel]; !ok {
					missing = append(missing, e.Rel)
				}
			}
		}
	}
	// A nested repository the index does not hold may be ignored (a dependency
	// cloned below node_modules): what is below it is the repository's choice.
	var askNested []string
	for _, rel := range nested {
		if _, ok := held[rel]; !ok {
			askNested = append(askNested, rel)
		}
	}
	ign, err := s.ignoredAmong(append(append([]string(nil), missing...), askNested...))
	if err != nil {
		notes = append(notes, "ignored files not told apart: "+err.Error())
	}
	for _, rel := range missing {
		if ign[rel] {
			ignored = append(ignored, rel)
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstatat(repoFd, rel, &st, unix.AT_SYMLINK_NOFOLLOW); errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			continue // gone since the walk (the audit's quarantine moved it, say)
		}
		out = append(out, Skipped{Path: shortPath(rel), Reason: whyNotStored(repoFd, rel)})
	}
	budget := maxUnseenIn
	for _, rel := range nested {
		if ign[rel] {
			continue
		}
		gitlink := held[rel].mode == 0o160000
		o, complete := belowNested(repoFd, rel, gitlink, since, &budget)
		out = append(out, o...)
		if !complete {
			notes = append(notes, fmt.Sprintf("below %s: not all checked against the record (a bound of %d entries, or a directory that cannot be read)", sanitize(rel), maxUnseenIn))
		}
	}
	if n := gitMetaChanged(repoFd, since); n != "" {
		notes = append(notes, n)
	}
	return out, ignored, notes
}

// special names a file type Git does not store ("" for the ones it does).
func special(mode uint32) string {
	switch mode {
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFCHR, unix.S_IFBLK:
		return "a device"
	}
	return ""
}

// ignoredAmong is which of rels the repository's .gitignore files match, asked of
// Git itself (check-ignore), so that its rules are the sweep's.
func (s *Store) ignoredAmong(rels []string) (map[string]bool, error) {
	if len(rels) == 0 {
		return nil, nil
	}
	var in bytes.Buffer
	for _, r := range rels {
		in.WriteString(r)
		in.WriteByte(0)
	}
	wt := s.git
	wt.workTree = s.Repo
	stdout, _, err := wt.run3(nil, &in, "check-ignore", "-z", "--stdin")
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 1) { // 1: none ignored
		return nil, err
	}
	got := map[string]bool{}
	for p := range strings.SplitSeq(string(stdout), "\x00") {
		if p != "" {
			got[p] = true
		}
	}
	return got, nil
}

// whyNotStored says why Git left rel out of the index, as well as the recorder can
// tell.
func whyNotStored(repoFd int, rel string) string {
	for c := range strings.SplitSeq(rel, "/") {
		l := strings.ToLower(strings.TrimRight(c, ". "))
		if l == ".git" || l == "git~1" {
			return "a path Git refuses (" + sanitize(c) + " reads as .git on some systems)"
		}
	}
	// Asked without opening it: it may have become a FIFO or a device since.
	if err := unix.Faccessat(repoFd, rel, unix.R_OK, unix.AT_EACCESS|unix.AT_SYMLINK_NOFOLLOW); errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
		return "cannot be read (its mode or owner keeps the recorder out)"
	}
	return "Git did not store it (see the notes)"
}

// belowNested names what changed since since below the nested repository rel: all
// of it when the record holds rel as a commit (gitlink), else what lies below a
// directory named .git, and the FIFOs, sockets and devices. budget bounds the
// entries looked at, across calls; complete is false when it ran out, or a
// directory could not be read.
func belowNested(repoFd int, rel string, gitlink bool, since int64, budget *int) (out []Skipped, complete bool) {
	fd, err := safepath.OpenBeneath(repoFd, rel, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC)
	if err != nil {
		return nil, false
	}
	complete = true
	var walk func(fd int, dir string, inGit bool, depth int)
	walk = func(fd int, dir string, inGit bool, depth int) {
		f := os.NewFile(uintptr(fd), dir)
		defer f.Close()
		for {
			ents, err := f.ReadDir(256)
			for _, d := range ents {
				if *budget <= 0 {
					complete = false
					return
				}
				*budget--
				name, p := d.Name(), dir+"/"+d.Name()
				var st unix.Stat_t
				if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
					complete = false
					continue
				}
				git := inGit || name == ".git"
				mode := st.Mode & unix.S_IFMT
				if mode == unix.S_IFDIR {
					if depth >= 64 {
						complete = false
						continue
					}
					sub, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
					if err != nil {
						complete = false
						continue
					}
					walk(sub, p, git, depth+1)
					continue
				}
				if st.Ctim.Nano() < since {
					continue
				}
				switch {
				case git:
					out = append(out, Skipped{Path: shortPath(p), Reason: "inside a directory named .git: Git stores nothing below one"})
				case gitlink:
					out = append(out, Skipped{Path: shortPath(p), Reason: "in the work tree of nested repository " + sanitize(rel) + ": recorded as its commit, not its files"})
				case special(mode) != "":
					out = append(out, Skipped{Path: shortPath(p), Reason: special(mode) + ": Git stores no FIFOs, sockets or devices"})
				}
			}
			if err == io.EOF || len(ents) == 0 {
				return
			}
			if err != nil {
				complete = false
				return
			}
		}
	}
	walk(fd, rel, false, 0)
	return out, complete
}

// gitMetaChanged is a note naming the entries of the repository's own .git changed
// since since (its top level only: HEAD, index, config, refs …), "" when none did.
// The record does not hold .git; the audit and the Git metadata snapshot do.
func gitMetaChanged(repoFd int, since int64) string {
	fd, err := safepath.OpenBeneath(repoFd, ".git", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC)
	if err != nil {
		return ""
	}
	f := os.NewFile(uintptr(fd), ".git")
	defer f.Close()
	ents, _ := f.ReadDir(1000)
	var changed []string
	for _, d := range ents {
		var st unix.Stat_t
		if unix.Fstatat(fd, d.Name(), &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Ctim.Nano() >= since {
			changed = append(changed, sanitize(d.Name()))
		}
	}
	if len(changed) == 0 {
		return ""
	}
	if len(changed) > 8 {
		changed = append(changed[:8], "…")
	}
	return "Git metadata changed during the session (.git: " + strings.Join(changed, ", ") + "): the record does not hold .git; the audit and the Git metadata snapshot do"
}
