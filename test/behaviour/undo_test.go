package behaviour

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// treeState is the working tree (without .git) as undo must put it back: each
// path's type, permission bits and content or link target.
func treeState(t *testing.T, root string) string {
	t.Helper()
	var lines []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == ".git" {
			return filepath.SkipDir
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			lines = append(lines, fmt.Sprintf("%s link %s", rel, target))
		case fi.IsDir():
			lines = append(lines, fmt.Sprintf("%s dir", rel))
		case fi.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			lines = append(lines, fmt.Sprintf("%s file %o %q", rel, fi.Mode().Perm(), b))
		default:
			lines = append(lines, fmt.Sprintf("%s other %v", rel, fi.Mode()))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// hostSh runs script on the host as the test user, in the repository.
func (b *box) hostSh(script string) {
	b.t.Helper()
	cmd := testenv.Command(b.t, b.home, "/bin/sh", "-c", script)
	cmd.Dir = b.repo
	cmd.Env = append(cmd.Env, "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid")
	if r := run(cmd); r.code != 0 {
		b.t.Fatalf("host script %q: %s", script, r)
	}
}

// undo runs agentbox undo ARGS in the repository.
func (b *box) undo(args ...string) result {
	b.t.Helper()
	return run(b.fixture().Agentbox(b.repo, append([]string{"undo"}, args...)...))
}

// lastID is the id of the repository's newest record.
func (b *box) lastID() string {
	b.t.Helper()
	r := run(b.fixture().Agentbox(b.repo, "log"))
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || len(lines) < 2 {
		b.t.Fatalf("agentbox log: %s", r)
	}
	return strings.Fields(lines[1])[0]
}

// TestUndoPutsTheTreeBack: a session that edits, creates, deletes, chmods and
// replaces files (and a directory) with symlinks is undone byte for byte, and the
// undo, recorded as an entry of its own, is undone in turn.
func TestUndoPutsTheTreeBack(t *testing.T) {
	for _, backend := range backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := newBox(t, backend)
			b.hostSh("printf 'a\\n' > a.txt && printf 'del\\n' > del.txt && printf '#!/bin/sh\\n' > run.sh && chmod 755 run.sh && " +
				"printf 'p\\n' > perm && chmod 640 perm && printf 'x\\n' > tolink && mkdir -p dir/deep && printf 's\\n' > dir/deep/sub.txt && " +
				"ln -s a.txt link && git add -A && git commit -qm base")
			before := treeState(t, b.repo)
			b.ok("printf 'changed\\n' >> a.txt && printf 'new\\n' > new.txt && mkdir -p nd/x && printf 'n\\n' > nd/x/f && " +
				"rm del.txt && chmod 644 run.sh && chmod 750 perm && rm tolink && ln -s /etc/passwd tolink && " +
				"rm -r dir && ln -s /tmp dir && ln -sfn run.sh link")
			after := treeState(t, b.repo)
			if after == before {
				t.Fatal("the session changed nothing")
			}
			if r := b.undo("--dry-run"); r.code != 0 || !strings.Contains(r.stdout, "would remove new.txt") || treeState(t, b.repo) != after {
				t.Fatalf("undo --dry-run: %s", r)
			}
			r := b.undo()
			if r.code != 0 {
				t.Fatalf("undo: %s", r)
			}
			if got := treeState(t, b.repo); got != before {
				t.Fatalf("after undo the tree is\n%s\nwant\n%s\n(%s)", got, before, r)
			}
			if r := b.undo(); r.code != 0 {
				t.Fatalf("undo of the undo: %s", r)
			}
			if got := treeState(t, b.repo); got != after {
				t.Fatalf("after the undo of the undo the tree is\n%s\nwant\n%s", got, after)
			}
		})
	}
}

// TestUndoStopsAtLaterChanges: a file changed on the host after the session ended
// stops the undo (nothing is changed); --force overwrites it.
func TestUndoStopsAtLaterChanges(t *testing.T) {
	for _, backend := range backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := newBox(t, backend)
			b.hostSh("printf 'one\\n' > f && printf 'two\\n' > g")
			b.ok("printf 'agent\\n' > f && printf 'agent\\n' > g")
			b.hostSh("printf 'user\\n' > f")
			r := b.undo()
			if r.code != 1 || !strings.Contains(r.stdout, "f: its content changed") || strings.Contains(r.stdout, " g:") {
				t.Fatalf("undo over a later change: %s", r)
			}
			if readFile(t, filepath.Join(b.repo, "f")) != "user\n" || readFile(t, filepath.Join(b.repo, "g")) != "agent\n" {
				t.Fatal("a stopped undo changed files")
			}
			if r := b.undo("--force"); r.code != 0 {
				t.Fatalf("undo --force: %s", r)
			}
			if readFile(t, filepath.Join(b.repo, "f")) != "one\n" || readFile(t, filepath.Join(b.repo, "g")) != "two\n" {
				t.Fatal("undo --force did not put the files back")
			}
		})
	}
}

// TestUndoPaths: with PATHs only those are put back; bad input is one line, exit 125.
func TestUndoPaths(t *testing.T) {
	b := newBox(t, backends(t)[0])
	b.hostSh("printf 'one\\n' > f && mkdir d && printf 'two\\n' > d/g")
	b.ok("printf 'agent\\n' > f && printf 'agent\\n' > d/g")
	if r := b.undo("--", "d"); r.code != 0 {
		t.Fatalf("undo -- d: %s", r)
	}
	if readFile(t, filepath.Join(b.repo, "f")) != "agent\n" || readFile(t, filepath.Join(b.repo, "d/g")) != "two\n" {
		t.Fatal("undo -- d did not put back d/g alone")
	}
	for _, args := range [][]string{{"20990101-000000-abcdef"}, {"--", "/etc/passwd"}, {"--", "../x"}, {"--", ".git/config"}, {"not-an-id!"}} {
		r := b.undo(args...)
		if r.code != 125 || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("undo %q: want exit 125 and one line: %s", args, r)
		}
	}
}

// TestUndoRefusedWhileRunning: no undo while a session of the repository runs.
func TestUndoRefusedWhileRunning(t *testing.T) {
	for _, backend := range backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := newBox(t, backend)
			b.ok("printf 'agent\\n' > f")
			done := b.lastID()
			res := make(chan result, 1)
			cmd := b.command(b.repo, nil, "touch started; i=0; while [ ! -e stop ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done")
			if err := startAndCollect(cmd, res); err != nil {
				t.Fatal(err)
			}
			if !waitFor(func() bool { return exists(filepath.Join(b.repo, "started")) }) {
				t.Fatal("the session did not start")
			}
			r := b.undo(done)
			b.hostSh("touch stop")
			<-res
			if r.code != 125 || !strings.Contains(r.stderr, "running") {
				t.Fatalf("undo while a session runs: %s", r)
			}
			if readFile(t, filepath.Join(b.repo, "f")) != "agent\n" {
				t.Fatal("a refused undo changed files")
			}
		})
	}
}

// TestUndoNeverWritesThroughPlantedSymlinks: a later session leaves a symlink where
// undo must write a parent directory, and a FIFO where it writes a file; undo
// writes nothing through the link, never blocks on the FIFO.
func TestUndoNeverWritesThroughPlantedSymlinks(t *testing.T) {
	for _, backend := range backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := newBox(t, backend)
			outside := filepath.Join(b.home, "outside")
			b.hostSh("mkdir " + outside + " && mkdir d && printf 's\\n' > d/sub && printf 'f\\n' > fifo && printf 'g\\n' > g")
			b.ok("rm -r d && printf 'agent\\n' > fifo && printf 'agent\\n' > g")
			first := b.lastID()
			b.ok("ln -s " + outside + " d && rm fifo && mkfifo fifo && rm g && ln -s " + outside + "/planted g")
			start := time.Now()
			r := b.undo("--force", first)
			if time.Since(start) > 30*time.Second {
				t.Fatalf("undo took %v", time.Since(start))
			}
			if r.code != 1 || !strings.Contains(r.stdout, "d/sub") || !strings.Contains(r.stdout, "symlink") {
				t.Fatalf("undo through a planted symlink: %s", r)
			}
			if ents, _ := os.ReadDir(outside); len(ents) != 0 {
				t.Fatalf("undo wrote through the symlink: %v", ents)
			}
			if fi, err := os.Lstat(filepath.Join(b.repo, "g")); err != nil || !fi.Mode().IsRegular() || readFile(t, filepath.Join(b.repo, "g")) != "g\n" {
				t.Fatalf("the planted symlink g was not replaced by the file: %v", err)
			}
			if readFile(t, filepath.Join(b.repo, "fifo")) != "f\n" {
				t.Fatal("the FIFO was not replaced by the file")
			}
			if target, err := os.Readlink(filepath.Join(b.repo, "d")); err != nil || target != outside {
				t.Fatalf("the planted link was changed: %q %v", target, err)
			}
		})
	}
}

// TestUndoGit: --git puts back HEAD, the refs and the index after commits, a branch
// and a rebase made inside (objects kept); an undo of that undo puts them back
// as the session left them.
func TestUndoGit(t *testing.T) {
	for _, backend := range backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := newBox(t, backend)
			b.hostSh("git add README && git commit -qm first && git branch side && printf 's\n' > s && git add s && git commit -qm second")
			git := func(args ...string) string { return testenv.Git(t, b.home, b.repo, args...) }
			heads := func() string {
				return git("for-each-ref", "--format=%(refname) %(objectname)") + "|" + git("symbolic-ref", "HEAD")
			}
			before, beforeIndex := heads(), git("ls-files", "-s")
			b.ok(`set -e
echo more >> README && git commit -qam third
git switch -q side && echo x > x && git add x && git commit -qm on-side
git rebase -q master 2>/dev/null || git rebase -q main
git branch made-inside
echo staged > st && git add st`)
			after := heads()
			if after == before {
				t.Fatal("the session changed no ref")
			}
			sessionTip := git("rev-parse", "made-inside")
			r := b.undo("--git")
			if r.code != 0 {
				t.Fatalf("undo --git: %s", r)
			}
			if got := heads(); got != before {
				t.Fatalf("after undo --git the refs are\n%s\nwant\n%s", got, before)
			}
			if got := git("ls-files", "-s"); got != beforeIndex {
				t.Fatalf("after undo --git the index is\n%s\nwant\n%s", got, beforeIndex)
			}
			if got := git("cat-file", "-t", sessionTip); got != "commit" {
				t.Fatalf("the session's commit is gone: %q", got)
			}
			if r := b.undo("--git"); r.code != 0 {
				t.Fatalf("undo --git of the undo: %s", r)
			}
			if got := heads(); got != after {
				t.Fatalf("after undoing the undo the refs are\n%s\nwant\n%s", got, after)
			}
		})
	}
}

// TestUndoListsWhatTheRecordDoesNotHold: a nested repository the session made is
// recorded as its commit only: undo names it and leaves it, and puts back the rest.
func TestUndoListsWhatTheRecordDoesNotHold(t *testing.T) {
	b := newBox(t, backends(t)[0])
	b.hostSh("printf 'one\\n' > f")
	b.ok("printf 'agent\\n' > f && mkdir sub && cd sub && git init -q && echo n > n && git add n && git commit -qm n")
	r := b.undo()
	if r.code != 0 || !strings.Contains(r.stdout, "left as it is: sub: a nested repository") {
		t.Fatalf("undo of a session that made a nested repository: %s", r)
	}
	if readFile(t, filepath.Join(b.repo, "f")) != "one\n" || readFile(t, filepath.Join(b.repo, "sub/n")) != "n\n" {
		t.Fatal("undo did not put f back, or touched the nested repository")
	}
}

// TestUndoGitNeverWritesThroughSymlinks: the session packs a branch's ref and puts
// a symlink to a directory outside where its loose ref lived; undo --git must not
// write the ref through it. The session's end audit moves such a link aside (a link
// out where Git writes); a second session can plant it again before undo runs,
// which the host's plant below stands for: undo's own guard must hold then.
func TestUndoGitNeverWritesThroughSymlinks(t *testing.T) {
	for _, backend := range backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := newBox(t, backend)
			outside := filepath.Join(b.home, "outside")
			b.hostSh("mkdir " + outside + " && git add README && git commit -qm first && git branch planted/x")
			b.ok("git pack-refs --all && rm -rf .git/refs/heads/planted && ln -s " + outside + " .git/refs/heads/planted")
			if fi, err := os.Lstat(filepath.Join(b.repo, ".git/refs/heads/planted")); err == nil && fi.Mode()&os.ModeSymlink != 0 {
				t.Fatal("the session's link out of .git/refs was left in place by its audit")
			}
			b.hostSh("rm -rf .git/refs/heads/planted && ln -s " + outside + " .git/refs/heads/planted")
			r := b.undo("--git")
			if r.code != 1 || !strings.Contains(r.stderr, "planted") {
				t.Fatalf("undo --git through a planted symlink: %s", r)
			}
			if ents, _ := os.ReadDir(outside); len(ents) != 0 {
				t.Fatalf("undo --git wrote through the symlink: %v", ents)
			}
		})
	}
}

// TestUndoListsIgnoredAndUnboundedFiles: files the record could not hold — one the
// repository's .gitignore leaves out, a sparse file past the recorder's bounds —
// are listed and left exactly as they are, never guessed; the rest is put back.
func TestUndoListsIgnoredAndUnboundedFiles(t *testing.T) {
	for _, backend := range backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := newBox(t, backend)
			b.hostSh("printf 'build/\\n' > .gitignore && printf 'one\\n' > f && printf 'small\\n' > grows && git add -A && git commit -qm base")
			b.ok("printf 'agent\\n' > f && mkdir build && printf 'out\\n' > build/out && truncate -s 3M grows")
			id := b.lastID()
			r := b.undo()
			if r.code != 0 || !strings.Contains(r.stdout, "left as it is: build/out: not in the record: the repository's .gitignore files leave it out") ||
				!regexp.MustCompile(`left as it is: grows: not in the record: .*sparse`).MatchString(r.stdout) {
				t.Fatalf("undo of a session with ignored and sparse files: %s", r)
			}
			if readFile(t, filepath.Join(b.repo, "f")) != "one\n" || readFile(t, filepath.Join(b.repo, "build/out")) != "out\n" {
				t.Fatal("undo did not put f back, or touched the ignored file")
			}
			if fi, err := os.Stat(filepath.Join(b.repo, "grows")); err != nil || fi.Size() != 3<<20 {
				t.Fatalf("undo touched the sparse file it does not hold: %v %v", fi, err)
			}
			if r := b.undo(id, "--", "build/out"); r.code != 0 || !strings.Contains(r.stdout, "left as it is: build/out") {
				t.Fatalf("undo -- build/out: %s", r)
			}
		})
	}
}

// TestUndoExactPermissionBits: undo puts each file's permission bits back byte for
// byte as the session found them — not only the executable bit Git keeps: a 0600
// file removed comes back 0600 (not the umask's), a 0750 one chmod'ed to 0700
// (the bit Git sees unchanged) and a 0640 one chmod'ed to 0644 are set back, a
// 0600 file rewritten keeps 0600; and the undo, undone, gives the session's bits.
// No set-id bit is involved (undo never makes a set-id file).
func TestUndoExactPermissionBits(t *testing.T) {
	for _, backend := range backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := newBox(t, backend)
			b.hostSh("umask 022 && printf 'k\\n' > key && chmod 600 key && printf '#!/bin/sh\\n' > tool && chmod 750 tool && " +
				"printf 'r\\n' > grp && chmod 640 grp && printf 's\\n' > secret && chmod 600 secret && printf 'x\\n' > plain && git add -A && git commit -qm base")
			before := treeState(t, b.repo)
			b.ok("rm key && chmod 700 tool && chmod 644 grp && printf 'agent\\n' > secret && chmod 755 plain")
			after := treeState(t, b.repo)
			if r := b.undo(); r.code != 0 {
				t.Fatalf("undo: %s", r)
			}
			if got := treeState(t, b.repo); got != before {
				t.Fatalf("after undo the tree is\n%s\nwant\n%s", got, before)
			}
			if r := b.undo(); r.code != 0 {
				t.Fatalf("undo of the undo: %s", r)
			}
			if got := treeState(t, b.repo); got != after {
				t.Fatalf("after the undo of the undo the tree is\n%s\nwant\n%s", got, after)
			}
		})
	}
}

// dirModes is each directory of the working tree (without .git) with its
// permission bits.
func dirModes(t *testing.T, root string) string {
	t.Helper()
	var lines []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == ".git" {
			return filepath.SkipDir
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		lines = append(lines, fmt.Sprintf("%s %o", rel, fi.Mode().Perm()))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// TestUndoUnderAnyUmask: under umask 077 and 000, undo puts back each file's and
// each directory's bits as the session found them (the umask does not apply), keeps
// an empty directory that was there before the session, and removes the ones the
// session made, empty or not.
func TestUndoUnderAnyUmask(t *testing.T) {
	for _, backend := range backends(t) {
		for _, mask := range []string{"077", "000"} {
			t.Run(backend+"/umask-"+mask, func(t *testing.T) {
				b := newBox(t, backend)
				b.hostSh("umask 022 && printf 'k\\n' > key && chmod 600 key && printf 'p\\n' > plain && mkdir -p d/e empty && " +
					"printf 'f\\n' > d/e/f && chmod 640 d/e/f && chmod 750 d && chmod 711 d/e && chmod 705 empty && git add -A && git commit -qm base")
				before, beforeDirs := treeState(t, b.repo), dirModes(t, b.repo)
				b.ok("rm -r d key && printf 'agent\\n' > plain && printf 'n\\n' > empty/new && mkdir -p made/x madeempty && printf 'm\\n' > made/x/f")
				cmd := b.fixture().Agentbox(b.repo, "undo")
				cmd.Args = append([]string{"/bin/sh", "-c", "umask " + mask + " && exec \"$0\" \"$@\""}, cmd.Args...)
				cmd.Path = "/bin/sh"
				if r := run(cmd); r.code != 0 {
					t.Fatalf("undo: %s", r)
				}
				if got := treeState(t, b.repo); got != before {
					t.Errorf("after undo the tree is\n%s\nwant\n%s", got, before)
				}
				if got := dirModes(t, b.repo); got != beforeDirs {
					t.Errorf("after undo the directories are\n%s\nwant\n%s", got, beforeDirs)
				}
			})
		}
	}
}
