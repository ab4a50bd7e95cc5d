package shadow

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/hostpath"
	"github.com/agentbox/agentbox/internal/treewalk"
)

// Bounds on the collector's Git (docs/promises.md P13). The recorder's `git add` reads the
// working tree, which the sandbox wrote: a FIFO named .gitignore or .gitattributes,
// or one in a nested repository's .git (HEAD, packed-refs, a loose ref, config),
// blocks Git's open(2) forever, and with it the session's end and — through the
// shadow repository's lock — every later launch. So every Git command runs in a
// process group of its own, with a hard time bound after which the group is killed,
// and a work-tree command is watched: the moment Git waits to open, or reads, a FIFO,
// or reads a file larger than maxRecordFile, it is killed and the file is named, and
// `git add` runs again without it (addAll). The shadow lock is waited for only so
// long.

// gitTimeout bounds one Git command. Far above what recording a large repository
// takes (the stat cache makes a record cost what changed), far below "forever". A
// variable for the tests only.
var gitTimeout = 10 * time.Minute

// lockTimeout bounds the wait for the shadow repository's lock: its holder's Git
// commands are bounded by gitTimeout each.
var lockTimeout = gitTimeout + time.Minute

// watchInterval is how often a work-tree command is checked for a FIFO wait.
const watchInterval = 50 * time.Millisecond

// BoundError is a Git command the collector stopped: it blocked on a file of the
// working tree, or ran past its time bound. Its message names the file.
type BoundError struct {
	Args    []string
	Blocked string        // the file Git was stopped at ("" when unknown)
	Why     string        // what the file is: "a FIFO where Git reads a file", …
	Timeout time.Duration // non-zero when the time bound was hit
	// Deadline: the bound hit was what was left of the record's deadline.
	Deadline bool
}

func (e *BoundError) Error() string {
	if e.Why != "" {
		what := sanitize(e.Blocked)
		if what == "" {
			what = "a file /proc does not name"
		}
		return fmt.Sprintf("git %s: stopped: it blocked on %s, %s", gitVerb(e.Args), what, e.Why)
	}
	if e.Deadline {
		return fmt.Sprintf("git %s: stopped: the record's deadline (%s) passed", gitVerb(e.Args), recordDeadline)
	}
	return fmt.Sprintf("git %s: stopped after %s (time bound)", gitVerb(e.Args), e.Timeout)
}

// bound is how long the next Git command may run: gitTimeout, or what is left of
// the record's deadline when one is set (at least a moment, so the command is
// started and stopped like any other).
func (g *git) bound() time.Duration {
	if g.deadline == nil || g.deadline.IsZero() {
		return gitTimeout
	}
	return max(min(time.Until(*g.deadline), gitTimeout), time.Millisecond)
}

// gitVerb is the Git command among args, after the "-c NAME=VALUE" options.
func gitVerb(args []string) string {
	for i := 0; i < len(args); i++ {
		switch {
		case args[i] == "-c":
			i++
		case !strings.HasPrefix(args[i], "-"):
			return args[i]
		}
	}
	return strings.Join(args, " ")
}

// runBounded runs c (built by g.cmd) to its end within the bounds above.
func (g *git) runBounded(c *exec.Cmd, args []string) error {
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if g.workTree == "" || !confineWorkTree {
		if err := c.Start(); err != nil {
			return err
		}
	} else {
		release, err := startConfined(c, g.readRoots()) // confine.go
		if err != nil {
			return err
		}
		defer release()
	}
	pid := c.Process.Pid
	done := make(chan error, 1)
	go func() {
		// A process of the group that keeps stdout open must not keep Wait
		// waiting: once Git has ended (not yet reaped, so the group's ID is
		// still its own) the group is killed, and Wait's copying of the output
		// ends with the last writer. No timer: a loaded machine can leave the
		// copying goroutine unscheduled for any time without failing the command.
		exitedUnreaped(pid)
		_ = unix.Kill(-pid, unix.SIGKILL)
		done <- c.Wait()
	}()
	bound := g.bound()
	limit := time.NewTimer(bound)
	defer limit.Stop()
	var tick <-chan time.Time
	if g.workTree != "" {
		t := time.NewTicker(watchInterval)
		defer t.Stop()
		tick = t.C
	}
	stop := func(be *BoundError) error {
		_ = unix.Kill(-pid, unix.SIGKILL)
		<-done
		return be
	}
	for {
		select {
		case err := <-done:
			return err
		case <-tick:
			if path, why, ok := blockedOn(pid, g.workTree); ok {
				return stop(&BoundError{Args: args, Blocked: path, Why: why})
			}
		case <-limit.C:
			return stop(&BoundError{Args: args, Timeout: bound, Deadline: bound < gitTimeout})
		}
	}
}

// exitedUnreaped waits until the child pid has ended, leaving it to be reaped.
func exitedUnreaped(pid int) {
	var info unix.Siginfo
	for unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil) == unix.EINTR {
	}
}

// blockedOn reports whether the process pid waits to open a FIFO (the kernel's
// wait_for_partner), has one open (it reads from it, blocked or fed without end), or
// reads a file of workTree that pricing would not let it read (price.go: larger
// than maxRecordFile, or sparse — it grew or lost its blocks since it was priced);
// path is the file ("" when /proc cannot tell) and why says what it is.
func blockedOn(pid int, workTree string) (path, why string, ok bool) {
	proc := "/proc/" + strconv.Itoa(pid)
	if b, err := os.ReadFile(proc + "/wchan"); err == nil && string(b) == "wait_for_partner" {
		return openingPath(pid), "a FIFO where Git reads a file", true
	}
	ents, _ := os.ReadDir(proc + "/fd")
	for _, e := range ents {
		fd := proc + "/fd/" + e.Name()
		target, err := os.Readlink(fd)
		if err != nil || !filepath.IsAbs(target) {
			continue // pipe:[…], socket:[…], anon_inode:…: Git's own
		}
		fi, err := os.Stat(fd)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeNamedPipe != 0:
			return target, "a FIFO where Git reads a file", true
		case fi.Mode().IsRegular() && hostpath.Within(target, workTree):
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				if why := costly(st.Size, st.Blocks, 0, 0); why != "" {
					return target, why, true
				}
			}
		}
	}
	return "", "", false
}

// syscallOf returns the system call pid is blocked in and its arguments, from
// /proc/PID/syscall ("NR ARG1 … ARG6 SP PC"); nr is -1 when unknown.
func syscallOf(pid int) (nr int64, args []uint64) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/syscall")
	if err != nil {
		return -1, nil
	}
	f := strings.Fields(string(b))
	if len(f) < 7 {
		return -1, nil
	}
	n, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return -1, nil
	}
	for _, a := range f[1:7] {
		v, err := strconv.ParseUint(strings.TrimPrefix(a, "0x"), 16, 64)
		if err != nil {
			return -1, nil
		}
		args = append(args, v)
	}
	return n, args
}

// openingPath is the path pid is opening in openat(2), read from its memory (the
// collector is its parent, so ptrace access allows it); "" when it cannot be told.
func openingPath(pid int) string {
	nr, args := syscallOf(pid)
	if nr != unix.SYS_OPENAT || len(args) < 2 {
		return ""
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		return ""
	}
	defer mem.Close()
	buf := make([]byte, unix.PathMax)
	n, _ := mem.ReadAt(buf, int64(args[1]))
	p, _, ok := bytes.Cut(buf[:n], []byte{0})
	if !ok || len(p) == 0 {
		return ""
	}
	path := string(p)
	if !filepath.IsAbs(path) {
		dir := fmt.Sprintf("/proc/%d/cwd", pid)
		if int32(args[0]) != unix.AT_FDCWD {
			dir = fmt.Sprintf("/proc/%d/fd/%d", pid, int32(args[0]))
		}
		if base, err := os.Readlink(dir); err == nil {
			path = filepath.Join(base, path)
		}
	}
	return path
}

// sanitize keeps a path from the working tree printable on one line: control
// characters, quotes and backslashes are escaped as Go would quote them.
func sanitize(s string) string {
	if strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f || r == '"' || r == '\\' }) {
		return strconv.Quote(s)
	}
	return s
}

// noExecDir is a directory in the shadow repository holding a `git` that does
// nothing. A work-tree command runs with it as GIT_EXEC_PATH and PATH: `git add`
// runs `git status` in every nested repository it records as a commit, and that
// Git reads the nested repository's own config and attributes and would run its
// clean filters (and any program it names) on the host. The stub answers "clean";
// the nested repository is recorded by its HEAD commit, which `git add` reads itself.
const noExecDir = "agentbox-noexec"

const noExecGit = "#!/bin/sh\n# agentbox: the collector's Git runs no other Git (shadow/bounds.go).\nexit 0\n"

// ensureNoExec creates dir/agentbox-noexec/git when it is missing or differs.
func ensureNoExec(dir string) error {
	d := filepath.Join(dir, noExecDir)
	p := filepath.Join(d, "git")
	if b, err := os.ReadFile(p); err == nil && string(b) == noExecGit {
		return nil
	}
	if err := os.MkdirAll(d, 0o700); err != nil {
		return fmt.Errorf("shadow: %w", err)
	}
	tmp, err := os.CreateTemp(d, ".git-*")
	if err != nil {
		return fmt.Errorf("shadow: %w", err)
	}
	_, err = tmp.WriteString(noExecGit)
	if err == nil {
		err = tmp.Chmod(0o700)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), p)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("shadow: %s: %w", p, err)
	}
	return nil
}

// noteBound tells s.Warn about err when a bound stopped the command.
func (s *Store) noteBound(err error) {
	var be *BoundError
	if s.Warn != nil && errors.As(err, &be) {
		s.Warn(be.Error())
	}
}

// maxSkips bounds how many times addAll leaves a path out and runs again.
const maxSkips = 8

// excludeFile, in the shadow repository, lists what addAll leaves out; it is given
// to Git as core.excludesFile, and only while there is something to leave out.
const excludeFile = "agentbox-exclude"

// addAll runs the recorder's `git add --all`. When a bound stops Git at a path, the
// path is left out and Git runs again: the directory whose .gitignore or
// .gitattributes it is (Git reads those for any directory it enters), the nested
// repository whose .git holds it, else the path itself. Tracked entries below it
// leave the shadow index (Git would read them again). notes name what was left out.
//
// paths, when not nil, limit it to those paths (NUL-separated on stdin, literal).
// pre is what pricing left out (price.go): left out from the start, the same way.
func (s *Store) addAll(wt git, paths []string, pre []Skipped) (stderr []byte, notes []string, err error) {
	var out []string
	if len(pre) > 0 {
		if len(pre) > maxPriced {
			return nil, nil, fmt.Errorf("%d files the recorder does not read (more than %d): not staged", len(pre), maxPriced)
		}
		if err := s.leaveOutPriced(wt, pre); err != nil {
			return nil, nil, err
		}
		priced := make(map[string]bool, len(pre))
		for _, sk := range pre {
			out = append(out, sk.Path)
			priced[sk.Path] = true
		}
		s.skipped = append(s.skipped, pre...)
		s.leftOut = true
		if paths != nil {
			paths = slices.DeleteFunc(slices.Clone(paths), func(p string) bool { return priced[p] })
			if len(paths) == 0 {
				return nil, nil, nil
			}
		}
	}
	var list []byte
	for _, p := range paths {
		list = append(append(list, p...), 0)
	}
	s.addedClock = treewalk.Now() // before Git's first lstat (changed.go)
	for {
		args := []string{"-c", "advice.addEmbeddedRepo=false", "-c", "advice.addIgnoredFile=false", "-c", "core.bigFileThreshold=1"}
		if len(out) > 0 {
			args = append(args, "-c", "core.excludesFile="+filepath.Join(s.Dir, excludeFile))
		}
		args = append(args, "add", "--all", "--ignore-errors")
		var stdin io.Reader
		if paths != nil {
			args = append(args, "--pathspec-from-file=-", "--pathspec-file-nul")
			stdin = bytes.NewReader(list)
		}
		_, stderr, err = wt.run3(nil, stdin, args...)
		s.noteBound(err)
		var be *BoundError
		if !errors.As(err, &be) {
			return stderr, notes, err
		}
		// The killed Git left its lock and its unfinished bulk check-in pack
		// (every blob it had written); the caller holds the store's (stage).
		s.dropUnfinished()
		if be.Why == "" || len(out) >= maxSkips {
			return stderr, notes, err
		}
		rel, ok := leaveOut(s.Repo, be.Blocked)
		if !ok || slices.Contains(out, rel) {
			return stderr, notes, err
		}
		out = append(out, rel)
		s.leftOut = true
		if werr := writeExcludes(s.Dir, out); werr != nil {
			return stderr, notes, err
		}
		if _, _, rerr := wt.run3(nil, nil, "rm", "-r", "-f", "--cached", "-q", "--ignore-unmatch", "--", rel); rerr != nil {
			s.dropUnfinished() // a stopped Git leaves its lock, and the next would fail on it
		}
		notes = append(notes, fmt.Sprintf("%s not recorded: %v", sanitize(rel), be))
		s.skipped = append(s.skipped, Skipped{Path: shortPath(rel), Reason: be.Error()})
	}
}

// writeExcludes writes the exclude file addAll gives Git: rels, exactly.
func writeExcludes(dir string, rels []string) error {
	var b strings.Builder
	for _, r := range rels {
		b.WriteString(ignorePattern(r) + "\n")
	}
	return os.WriteFile(filepath.Join(dir, excludeFile), []byte(b.String()), 0o600)
}

// leaveOutPriced drops pricing's left-out files from the index (a tracked file
// that grew past a bound is read by `git add` whatever its excludes say) and
// writes them as excludes (an untracked one).
func (s *Store) leaveOutPriced(wt git, pre []Skipped) error {
	rels := make([]string, len(pre))
	var list []byte
	for i, sk := range pre {
		if strings.ContainsAny(sk.Path, "\n\r") {
			return fmt.Errorf("shadow: %s: not read (%s), and no exclude pattern can name it", sanitize(sk.Path), sk.Reason)
		}
		rels[i] = sk.Path
		list = append(append(list, sk.Path...), 0)
	}
	if err := writeExcludes(s.Dir, rels); err != nil {
		return fmt.Errorf("shadow: %w", err)
	}
	// update-index, not rm: rm's index write reads racily clean entries' content.
	_, _, err := wt.run3(nil, bytes.NewReader(list), "update-index", "--force-remove", "-z", "--stdin")
	if err != nil {
		s.dropUnfinished() // a stopped Git leaves its lock
	}
	return err
}

// leaveOut is what to leave out of the record, relative to repo, for Git stopped
// at path; ok is false when that would be the whole tree, or cannot be expressed.
func leaveOut(repo, path string) (string, bool) {
	rel, err := filepath.Rel(repo, path)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") || strings.ContainsAny(rel, "\n\r") {
		return "", false
	}
	parts := strings.Split(rel, string(filepath.Separator))
	for i, p := range parts {
		if p == ".git" && i > 0 {
			return filepath.Join(parts[:i]...), true // the nested repository
		}
	}
	switch parts[len(parts)-1] {
	case ".gitignore", ".gitattributes":
		if len(parts) == 1 {
			return "", false
		}
		return filepath.Join(parts[:len(parts)-1]...), true
	}
	return rel, true
}

// ignorePattern matches exactly rel from the top of the work tree: gitignore's
// special characters are escaped.
func ignorePattern(rel string) string {
	var b strings.Builder
	b.WriteByte('/')
	for _, r := range filepath.ToSlash(rel) {
		if strings.ContainsRune(`\*?[]!# `, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
