package adversarial

import (
	"bytes"
	"crypto/sha1"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/gitindex"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// craftIndex is a Git index of the given version whose entries all name blob oid
// (of size bytes, mode 100755) at paths: what a session can write to .git/index,
// bypassing the checks Git makes only when it adds a path to the index itself.
func craftIndex(version int, oid []byte, size int, paths []string) []byte {
	return gitindex.Index{Version: version, OID: oid, Mode: 0o100755, Size: uint32(size)}.Bytes(paths)
}

// TestIndexNamingGitDirPaths: a session writes .git/index itself, with an entry
// whose path is inside .git (a hook). Git checks that only when it adds a path, not
// when it reads an index: the operator's `git checkout -- .` (discard the changes)
// wrote .git/hooks/post-checkout and ran it, on the host. The audit reads every
// index entry by entry and moves such an index out of the repository.
func TestIndexNamingGitDirPaths(t *testing.T) {
	forms := []struct {
		name    string
		version int
		paths   []string
	}{
		{"v2 .git/hooks", 2, []string{".git/hooks/post-checkout", "README"}},
		{"v4 prefix-compressed, through ..", 4, []string{"README", "sub/../.git/hooks/post-checkout"}},
	}
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			for _, f := range forms {
				t.Run(f.name, func(t *testing.T) {
					x := newTarget(t, backend)
					sandboxtest.WriteFile(t, filepath.Join(x.Repo, "README"), "hi\n")
					testenv.Git(t, x.Home, x.Repo, "add", "README")
					testenv.Git(t, x.Home, x.Repo, "commit", "-qm", "start")
					hook := fmt.Sprintf("#!/bin/sh\ntouch %s/post-checkout\n", x.Pwned)
					payload := filepath.Join(x.Outside, "payload")
					sandboxtest.WriteFile(t, payload, hook)
					oid := sha1.Sum([]byte(fmt.Sprintf("blob %d\x00%s", len(hook), hook)))
					index := filepath.Join(x.Outside, "index")
					if err := os.WriteFile(index, craftIndex(f.version, oid[:], len(hook), f.paths), 0o644); err != nil {
						t.Fatal(err)
					}
					testenv.Chown(t, x.Outside)
					script := `git hash-object -w "$OUTSIDE/payload" >/dev/null && cp "$OUTSIDE/index" .git/index && git ls-files | grep -q hooks/post-checkout && echo PLANTED; echo DONE`
					cmd := x.Command(x.Repo, []string{"--no-git-save"}, script)
					cmd.Env = append(cmd.Env, "OUTSIDE="+x.Outside)
					r := sandboxtest.Run(cmd)
					if !strings.Contains(r.Stdout, "PLANTED") || !strings.Contains(r.Stdout, "DONE") {
						t.Fatalf("the session could not plant the index:\n%s", r)
					}
					if !strings.Contains(r.Stderr, ".git/index (index): names ") || !strings.Contains(r.Stderr, "moved to ") {
						t.Errorf("the audit did not move the index out:\n%s", r)
					}
					// What the operator does next: discard the session's changes.
					for _, args := range [][]string{{"checkout", "--", "."}, {"checkout-index", "-a", "-f"}, {"status", "--short"}} {
						c := testenv.Command(t, x.Home, "git", args...)
						c.Dir = x.Repo
						c.Env = append(c.Env, "GIT_CONFIG_NOSYSTEM=1")
						out, _ := c.CombinedOutput()
						t.Logf("git %s: %s", strings.Join(args, " "), out)
					}
					if _, err := os.Lstat(filepath.Join(x.Repo, ".git/hooks/post-checkout")); err == nil {
						t.Errorf("the operator's git checkout wrote .git/hooks/post-checkout from the session's index")
					}
					if _, err := os.Lstat(filepath.Join(x.Pwned, "post-checkout")); err == nil {
						t.Errorf("the operator's git checkout ran the hook the session's index named")
					}
				})
			}
		})
	}
}

// TestUndoGitRefusesAnotherSessionsIndex: session B starts while session A has
// planted .git/index, so B's Git metadata snapshot holds A's index; the audits move
// it out of .git. The operator's `agentbox undo --git B` put that index back after
// the undo's own audit, and the operator's next `git checkout -- .` wrote and ran
// the hook it names. undo --git must refuse it, naming the entry.
func TestUndoGitRefusesAnotherSessionsIndex(t *testing.T) {
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			x := newPair(t, backend)
			sandboxtest.WriteFile(t, filepath.Join(x.Repo, "README"), "hi\n")
			testenv.Git(t, x.Home, x.Repo, "add", "README")
			testenv.Git(t, x.Home, x.Repo, "commit", "-qm", "start")
			hook := fmt.Sprintf("#!/bin/sh\ntouch %s/post-checkout\n", x.Pwned)
			sandboxtest.WriteFile(t, filepath.Join(x.Repo, ".sync", "payload"), hook)
			oid := sha1.Sum([]byte(fmt.Sprintf("blob %d\x00%s", len(hook), hook)))
			if err := os.WriteFile(filepath.Join(x.Repo, ".sync", "index"), craftIndex(2, oid[:], len(hook), []string{".git/hooks/post-checkout", "README"}), 0o644); err != nil {
				t.Fatal(err)
			}
			testenv.Chown(t, x.Repo)
			_, a := x.start(`git hash-object -w "$REPO/.sync/payload" >/dev/null; cp "$REPO/.sync/index" .git/index; signal A-planted; await A-go`)
			x.await("A-planted")
			_, b := x.start(`echo B ran`)
			rb := x.wait("B", b)
			x.signal("A-go")
			ra := x.wait("A", a)
			if !strings.Contains(ra.Stderr+rb.Stderr, ".git/index (index): names ") {
				t.Fatalf("neither session's audit moved the planted index out:\nA: %s\nB: %s", ra, rb)
			}
			l := sandboxtest.Run(x.Agentbox(x.Repo, "log", "--json"))
			var recs []struct {
				ID      string   `json:"id"`
				Command []string `json:"command"`
			}
			if err := json.Unmarshal([]byte(l.Stdout), &recs); err != nil {
				t.Fatalf("agentbox log --json: %v\n%s", err, l)
			}
			idB := ""
			for _, r := range recs {
				if strings.Contains(strings.Join(r.Command, " "), "echo B ran") {
					idB = r.ID
				}
			}
			if idB == "" {
				t.Fatalf("no record of session B:\n%s", l.Stdout)
			}
			u := sandboxtest.Run(x.Agentbox(x.Repo, "undo", "--git", idB))
			if u.Code != 125 || !strings.Contains(u.Stderr, ".git/hooks/post-checkout") || strings.Count(strings.TrimSpace(u.Stderr), "\n") != 0 {
				t.Errorf("agentbox undo --git %s: want exit 125 and one line naming the entry:\n%s", idB, u)
			}
			c := testenv.Command(t, x.Home, "git", "checkout", "--", ".")
			c.Dir = x.Repo
			out, _ := c.CombinedOutput()
			t.Logf("git checkout -- .: %s", out)
			if _, err := os.Lstat(filepath.Join(x.Repo, ".git/hooks/post-checkout")); err == nil {
				t.Errorf("the operator's git checkout wrote .git/hooks/post-checkout from the index undo --git put back")
			}
			if _, err := os.Lstat(filepath.Join(x.Pwned, "post-checkout")); err == nil {
				t.Errorf("the operator's git checkout ran the hook the put-back index named")
			}
		})
	}
}

// TestSparseIndexWithPlantedTree: in a repository without sparse-checkout settings,
// the session writes a tree whose entry Git refuses ("../x") and a sparse index
// whose directory entry "sub/" names it. Git expands such an index at every read,
// refuses the path and (Git 2.39) crashes: every Git command of the operator's
// failed until `rm .git/index && git reset` (red23s). The audit moves the index to
// the quarantine and says to run git reset; the operator's git status then runs,
// and git reset gives a clean tree. The same when the session also writes a
// .git/config.worktree turning index.sparse on, which Git does not read without
// extensions.worktreeConfig (the audit took it at its word, review12).
func TestSparseIndexWithPlantedTree(t *testing.T) {
	for _, backend := range sandboxtest.Backends(t) {
		for _, plant := range []struct{ name, script string }{
			{"index", ""},
			{"index and config.worktree", `printf '[index]\n\tsparse = true\n' > .git/config.worktree && `},
		} {
			t.Run(backend+"/"+plant.name, func(t *testing.T) {
				sparseIndexWithPlantedTree(t, backend, plant.script)
			})
		}
	}
}

func sparseIndexWithPlantedTree(t *testing.T, backend, plant string) {
	x := newTarget(t, backend)
	for _, d := range []string{"keep", "sub"} {
		if err := os.Mkdir(filepath.Join(x.Repo, d), 0o755); err != nil {
			t.Fatal(err)
		}
		sandboxtest.WriteFile(t, filepath.Join(x.Repo, d, "f"), d+"\n")
	}
	testenv.Chown(t, x.Repo)
	testenv.Git(t, x.Home, x.Repo, "add", ".")
	testenv.Git(t, x.Home, x.Repo, "commit", "-qm", "start")
	// The plant, made outside: a clone's sparse index, its "sub/" pointed at
	// the bad tree, whose bytes the session writes into the repository.
	scratch := filepath.Join(x.Outside, "scratch")
	testenv.Git(t, x.Home, x.Outside, "clone", "-q", x.Repo, scratch)
	testenv.Git(t, x.Home, scratch, "sparse-checkout", "set", "--cone", "--sparse-index", "keep")
	tree := append([]byte("100644 ../x\x00"), bytes.Repeat([]byte{0xab}, sha1.Size)...)
	treeID := sha1.Sum(append([]byte(fmt.Sprintf("tree %d\x00", len(tree))), tree...))
	idx, err := os.ReadFile(filepath.Join(scratch, ".git", "index"))
	if err != nil {
		t.Fatal(err)
	}
	idx, ok := gitindex.PointSparseDir(idx, "sub/", treeID[:])
	if !ok {
		t.Fatal("git wrote no sparse directory entry sub/")
	}
	if err := os.WriteFile(filepath.Join(x.Outside, "index"), idx, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(x.Outside, "tree"), tree, 0o644); err != nil {
		t.Fatal(err)
	}
	testenv.Chown(t, x.Outside)
	script := plant + `git hash-object -t tree --literally -w --stdin < "$OUTSIDE/tree" >/dev/null && cp "$OUTSIDE/index" .git/index && echo PLANTED; git status >/dev/null 2>&1 || echo CRASHES; echo DONE`
	cmd := x.Command(x.Repo, []string{"--no-git-save"}, script)
	cmd.Env = append(cmd.Env, "OUTSIDE="+x.Outside)
	r := sandboxtest.Run(cmd)
	if !strings.Contains(r.Stdout, "PLANTED") || !strings.Contains(r.Stdout, "CRASHES") {
		t.Fatalf("the session could not plant an index that stops Git:\n%s", r)
	}
	if !strings.Contains(r.Stderr, ".git/index (index): is a sparse index") || !strings.Contains(r.Stderr, "git reset") || !strings.Contains(r.Stderr, "moved to ") {
		t.Errorf("the audit did not move the sparse index out:\n%s", r)
	}
	// What the operator does next.
	status := testenv.Command(t, x.Home, "git", "status", "--porcelain")
	status.Dir = x.Repo
	status.Env = append(status.Env, "GIT_CONFIG_NOSYSTEM=1")
	if out, err := status.CombinedOutput(); err != nil {
		t.Errorf("the operator's git status after the session: %v\n%s", err, out)
	}
	testenv.Git(t, x.Home, x.Repo, "reset", "-q")
	if out := testenv.Git(t, x.Home, x.Repo, "status", "--porcelain"); out != "" {
		t.Errorf("after git reset: %q, want a clean tree", out)
	}
}
