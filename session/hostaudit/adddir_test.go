package hostaudit

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/gitguard/audit"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/policy"
)

// TestAddDirOrphanAtRepoLaunch: a killed launcher's pending audit of an --add-dir
// directory runs at the next launch in the session's repository (and so at
// `agentbox audit` there), which does not add the directory again.
func TestAddDirOrphanAtRepoLaunch(t *testing.T) {
	top, repo, dir, outside := addDirRepos(t)
	cfg, stderr, state, d, plant := killedAddDirSession(t, top, repo, dir, outside)
	Orphans(cfg, &policy.Policy{Repo: repo, StateDir: state})
	if !strings.Contains(stderr.String(), "audited now: 1 finding(s)") {
		t.Errorf("the added directory's pending audit did not run:\n%s", stderr.String())
	}
	if _, err := os.Lstat(plant); err == nil {
		t.Errorf("the plant in the added directory was left:\n%s", stderr.String())
	}
	if _, err := os.Stat(d.list[0].journalPath); !os.IsNotExist(err) {
		t.Errorf("the pending audit stayed (%v)", err)
	}
}

// TestAddDirOrphanAtRepoReachedByAnotherPath: as TestAddDirOrphanAtRepoLaunch, but
// the session's repository is moved after the launcher was killed, and the next
// launch works in it at its new path, adding nothing: the added directory's
// pending audit runs there too, matched by the repository's identity.
func TestAddDirOrphanAtRepoReachedByAnotherPath(t *testing.T) {
	top, repo, dir, outside := addDirRepos(t)
	if h, err := audit.Hold(repo); err != nil || h.Birth == 0 {
		testenv.Skip(t, "no birth time on %s's filesystem (%v): a moved repository is not matched without one", top, err)
	}
	cfg, stderr, state, _, plant := killedAddDirSession(t, top, repo, dir, outside)
	moved := filepath.Join(top, "moved")
	if err := os.Rename(repo, moved); err != nil {
		t.Fatal(err)
	}
	// A new directory at the old path is not the session's repository.
	other := filepath.Join(top, "other")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	Orphans(cfg, &policy.Policy{Repo: other, StateDir: state})
	if _, err := os.Lstat(plant); err != nil {
		t.Fatalf("a launch in another repository ran the added directory's audit:\n%s", stderr.String())
	}
	Orphans(cfg, &policy.Policy{Repo: moved, StateDir: state})
	if !strings.Contains(stderr.String(), "audited now: 1 finding(s)") {
		t.Errorf("the added directory's pending audit did not run at the repository's new path:\n%s", stderr.String())
	}
	if _, err := os.Lstat(plant); err == nil {
		t.Errorf("the plant in the added directory was left:\n%s", stderr.String())
	}
}

// addDirRepos makes a repository, a further Git directory for --add-dir and one
// outside both, below a fresh canonical top.
func addDirRepos(t *testing.T) (top, repo, dir, outside string) {
	top, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	repo, dir, outside = filepath.Join(top, "repo"), filepath.Join(top, "lib"), filepath.Join(top, "outside")
	for _, d := range []string{repo, dir, outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		testenv.LocalGit(t, d, "init", "-q")
	}
	return top, repo, dir, outside
}

// killedAddDirSession starts the audits of a session in repo adding dir, plants a
// ref linked to outside in dir, and drops the audits as a killed launcher does.
func killedAddDirSession(t *testing.T, top, repo, dir, outside string) (*Config, *bytes.Buffer, string, *Dirs, string) {
	state := filepath.Join(top, "state")
	stderr := &bytes.Buffer{}
	cfg := &Config{Stderr: stderr, NoRecord: true}
	d, err := StartDirs(cfg, &policy.Policy{Repo: repo, StateDir: state, AddDirs: []string{dir}})
	if err != nil {
		t.Fatal(err)
	}
	plant := filepath.Join(dir, ".git/refs/heads/out")
	if err := os.Symlink(outside, plant); err != nil {
		t.Fatal(err)
	}
	for _, a := range d.list { // the launcher is killed
		a.journal.Close()
		a.held.Close()
		closeAll(a.heldGitDirs)
	}
	return cfg, stderr, state, d, plant
}
