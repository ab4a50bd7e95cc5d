package adversarial

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// plantInWo plants, inside the session, a nested repository wo/sub whose config runs
// a program on the operator's next git status there.
const plantInWo = `set -e
mkdir -p wo/sub
git -C wo/sub init -q
git -C wo/sub config core.fsmonitor "touch $PWNED/fsmonitor"
`

// TestAuditSeesIntoUnreadableDirs: a plant below a directory (or in a config) the
// audit cannot read as found is still found, or moved aside, and never left for the
// operator's Git; the modes the session set are put back.
func TestAuditSeesIntoUnreadableDirs(t *testing.T) {
	deep := "d=.; for i in $(seq 1 257); do d=$d/d; done; mkdir -p $d; cd $d\n" + plantInWo
	rows := []struct {
		name, script string
		modes        map[string]os.FileMode // what the session's modes must still be after it
	}{
		{"x-only dir", plantInWo + "chmod 0311 wo\n", map[string]os.FileMode{"wo": 0o311}},
		{"no-permission dir", plantInWo + "chmod 0000 wo\n", map[string]os.FileMode{"wo": 0o000}},
		{"write-only dir", plantInWo + "chmod 0200 wo\n", map[string]os.FileMode{"wo": 0o200}},
		{"x-only gitdir", plantInWo + "chmod 0111 wo/sub/.git\n", map[string]os.FileMode{"wo/sub/.git": 0o111}},
		{"no-permission gitdir", plantInWo + "chmod 0000 wo/sub/.git\n", map[string]os.FileMode{"wo/sub/.git": 0o000}},
		{"unreadable nested config", plantInWo + "chmod 0000 wo/sub/.git/config\n", nil},
		{"too deep", deep, nil},
		// Unlistable already at launch, with a clean nested repository: the
		// baseline must not take what the session plants there for the user's.
		{"x-only dir at launch", "chmod 0711 wo && " + `git -C wo/sub config core.fsmonitor "touch $PWNED/fsmonitor" && chmod 0311 wo` + "\n", map[string]os.FileMode{"wo": 0o311}},
		// The same in an --add-dir, which has the same audit.
		{"x-only dir in an --add-dir", `cd "$ADD"` + "\n" + plantInWo + "chmod 0311 wo\n", map[string]os.FileMode{"../extra/wo": 0o311}},
	}
	for _, backend := range sandboxtest.Backends(t) {
		for _, row := range rows {
			t.Run(backend+"/"+row.name, func(t *testing.T) {
				x := newTarget(t, backend)
				add := filepath.Join(filepath.Dir(x.Repo), "extra")
				if err := os.Mkdir(add, 0o755); err != nil {
					t.Fatal(err)
				}
				testenv.Chown(t, add)
				if strings.HasSuffix(row.name, "at launch") {
					sub := filepath.Join(x.Repo, "wo/sub")
					if err := os.MkdirAll(sub, 0o755); err != nil {
						t.Fatal(err)
					}
					testenv.Chown(t, x.Repo)
					testenv.Git(t, x.Home, sub, "init", "-q")
					if err := os.Chmod(filepath.Join(x.Repo, "wo"), 0o311); err != nil {
						t.Fatal(err)
					}
				}
				cmd := x.Agentbox(x.Repo, "exec", "--backend", backend, "--no-git-save", "--add-dir", add, "--", "/bin/sh", "-c", row.script)
				cmd.Env = append(cmd.Env, "PWNED="+x.Pwned, "ADD="+add)
				r := sandboxtest.Run(cmd)
				if !strings.Contains(r.Stderr, "agentbox: audit: ") {
					t.Errorf("no audit line:\n%s", r)
				}
				if r.Code != 0 && !strings.Contains(r.Stderr, "NOT moved") {
					t.Errorf("a failed session without a line saying what was left:\n%s", r)
				}
				journalEmpty(t, x.Home)
				for rel, want := range row.modes {
					if fi, err := os.Lstat(filepath.Join(x.Repo, rel)); err == nil && fi.Mode().Perm() != want {
						t.Errorf("%s: mode %o after the audit, want the session's %o back", rel, fi.Mode().Perm(), want)
					}
				}
				// The operator makes the tree readable again and runs Git in every
				// directory the plant could be in.
				for _, dir := range []string{x.Repo, add} {
					checkNoPlant(t, x, dir)
				}
				if t.Failed() {
					t.Logf("session:\n%s", r)
				}
			})
		}
	}
}

// checkNoPlant makes dir readable, as the operator would before working there, and
// runs the operator's Git in every directory below it the plant could be in.
func checkNoPlant(t *testing.T, x *target, dir string) {
	t.Helper()
	readable(t, dir)
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && d.Name() == "sub" {
			operatorGitRunsNothingIn(t, x, p)
		}
		return nil
	})
}

// readable gives the owner read, write and search permission on everything below
// dir, as an operator would before working there.
func readable(t *testing.T, dir string) {
	t.Helper()
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if d == nil || d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		if fi, err := os.Lstat(p); err == nil {
			_ = os.Chmod(p, fi.Mode().Perm()|0o700)
		}
		if err != nil && d.IsDir() {
			// Listed before it was made readable: walk it again.
			readable(t, p)
		}
		return nil
	})
}

// journalEmpty: once a session's audits are done, the journal of widened modes
// (internal/widen) holds nothing of theirs: every mode they widened was put back.
func journalEmpty(t *testing.T, home string) {
	t.Helper()
	left, _ := filepath.Glob(filepath.Join(home, ".local/state/agentbox/widen/[eh]-*"))
	if len(left) > 0 {
		t.Errorf("the widen journal still holds %v after the session", left)
	}
}
