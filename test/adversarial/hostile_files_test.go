package adversarial

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// Files the sandbox makes where host-side work reads (issue 14 §5): FIFOs where Git
// opens a file by name. The session must return, say what it skipped or moved on
// stderr and in its record, leave nothing that hangs the operator's Git, and the
// next launch in the repository must work. Timeouts here detect hangs; they are not
// timing assertions.

// hangBound is how long a launch may take before the test calls it hung.
const hangBound = 3 * time.Minute

// runBounded runs `agentbox exec` of script in the box (recorded and snapshotted, as
// a user's session is) and fails the test when it does not end within hangBound.
func runBounded(t *testing.T, b *sandboxtest.Box, script string) sandboxtest.Result {
	t.Helper()
	cmd := b.Command(b.Repo, nil, script)
	res := make(chan sandboxtest.Result, 1)
	if err := sandboxtest.StartAndCollect(cmd, res); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-res:
		return r
	case <-time.After(hangBound):
		_ = cmd.Process.Kill()
		t.Fatalf("launch hung (killed after %s): %s", hangBound, script)
	}
	return sandboxtest.Result{}
}

// lastRecord is `agentbox show` of the newest session of the box's repository.
func lastRecord(t *testing.T, b *sandboxtest.Box) string {
	t.Helper()
	log := sandboxtest.Run(b.Agentbox(b.Repo, "log"))
	lines := strings.Split(strings.TrimSpace(log.Stdout), "\n")
	if log.Code != 0 || len(lines) < 2 {
		t.Fatalf("agentbox log: %s", log)
	}
	id := strings.Fields(lines[1])[0]
	show := sandboxtest.Run(b.Agentbox(b.Repo, "show", id))
	if show.Code != 0 {
		t.Fatalf("agentbox show %s: %s", id, show)
	}
	return show.Stdout
}

// operatorGitReturns runs the operator's git status on the host and fails when it
// hangs (a FIFO left where Git opens a file).
func operatorGitReturns(t *testing.T, b *sandboxtest.Box, dir string) {
	t.Helper()
	cmd := testenv.Command(t, b.Home, "git", "status", "--porcelain")
	cmd.Dir = dir
	res := make(chan sandboxtest.Result, 1)
	if err := sandboxtest.StartAndCollect(cmd, res); err != nil {
		t.Fatal(err)
	}
	select {
	case <-res:
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		t.Errorf("the operator's git status in %s hung", dir)
	}
}

func isFIFO(p string) bool {
	fi, err := os.Lstat(p)
	return err == nil && fi.Mode()&os.ModeNamedPipe != 0
}

// TestFIFOsWhereGitReads: the session plants a FIFO where Git opens a file (config
// include targets inside the repository are read-only inside, P7). Its audit
// moves it out of the repository and says so; the record names it; the next launch
// and the operator's git status work.
func TestFIFOsWhereGitReads(t *testing.T) {
	nested := `git init -q -b master nest && echo x > nest/x && git -C nest add x && git -C nest commit -qm n && `
	rows := []struct {
		rel, script string
		setup       func(t *testing.T, b *sandboxtest.Box)
	}{
		{".gitignore", "", nil},
		{"sub/.gitignore", "mkdir -p sub && ", nil},
		{"sub/.gitattributes", "mkdir -p sub && echo x > sub/f && ", nil},
		{".gitmodules", "", nil},
		{".mailmap", "", nil},
		{".git/index", "", nil},
		{".git/packed-refs", "", nil},
		{".git/info/exclude", "mkdir -p .git/info && ", nil},
		{"nest/.git/HEAD", nested, nil},
		{"nest/.git/packed-refs", nested, nil},
		{"nest/.git/refs/heads/master", nested, nil},
	}
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			for _, row := range rows {
				t.Run(row.rel, func(t *testing.T) {
					b := sandboxtest.NewBox(t, backend)
					if row.setup != nil {
						row.setup(t, b)
					}
					p := filepath.Join(b.Repo, row.rel)
					r := runBounded(t, b, row.script+`rm -f "`+row.rel+`" && mkfifo "`+row.rel+`" && echo PLANTED`)
					if r.Code != 0 || !strings.Contains(r.Stdout, "PLANTED") {
						t.Fatalf("planting session: %s", r)
					}
					if !strings.Contains(r.Stderr, "agentbox: audit: "+p+" (") {
						t.Errorf("stderr does not name the FIFO %s:\n%s", p, r.Stderr)
					}
					if isFIFO(p) {
						t.Errorf("the FIFO is still at %s", p)
					}
					if rec := lastRecord(t, b); !strings.Contains(rec, p) {
						t.Errorf("the record does not name %s:\n%s", p, rec)
					}
					operatorGitReturns(t, b, b.Repo)
					if next := runBounded(t, b, "echo NEXT"); next.Code != 0 || !strings.Contains(next.Stdout, "NEXT") {
						t.Errorf("next launch: %s", next)
					}
				})
			}
		})
	}
}

// TestFIFOsAtLaunch: a FIFO is there when the session starts — left by a session
// still running on the repository, or by the user — so the audit takes it for the
// baseline and leaves it. The recorder's Git would block on it at the start and the
// end of every session: it is stopped at once, and the FIFO is named on stderr and in
// the record; the launch and the next one work.
func TestFIFOsAtLaunch(t *testing.T) {
	rows := []struct {
		rel   string
		setup func(t *testing.T, b *sandboxtest.Box)
	}{
		{".gitignore", nil},
		{"sub/.gitattributes", func(t *testing.T, b *sandboxtest.Box) {
			mkUserDir(t, filepath.Join(b.Repo, "sub"))
			sandboxtest.WriteFile(t, filepath.Join(b.Repo, "sub/f"), "x\n")
		}},
		{"nest/.git/HEAD", func(t *testing.T, b *sandboxtest.Box) { nestedRepo(t, b, "nest") }},
		{"nest/.git/config", func(t *testing.T, b *sandboxtest.Box) { nestedRepo(t, b, "nest") }},
	}
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			for _, row := range rows {
				t.Run(row.rel, func(t *testing.T) {
					b := sandboxtest.NewBox(t, backend)
					if row.setup != nil {
						row.setup(t, b)
					}
					p := filepath.Join(b.Repo, row.rel)
					_ = os.Remove(p)
					if err := mkfifoAs(t, p); err != nil {
						t.Fatal(err)
					}
					for _, run := range []string{"first", "next"} {
						r := runBounded(t, b, "echo RAN")
						if r.Code != 0 || !strings.Contains(r.Stdout, "RAN") {
							t.Fatalf("%s launch: %s", run, r)
						}
						if !strings.Contains(r.Stderr, "blocked on "+p) {
							t.Errorf("%s launch: stderr does not name the FIFO %s:\n%s", run, p, r.Stderr)
						}
						if rec := lastRecord(t, b); !strings.Contains(rec, "blocked on "+p) {
							t.Errorf("%s launch: the record does not name %s:\n%s", run, p, rec)
						}
					}
				})
			}
		})
	}
}

// TestNestedRepoFilterNotRun: a nested repository whose own config defines a clean
// filter for its files (a session still running could plant one; here it is there
// before the launch). The recorder's `git add` used to run `git status` in it, which
// ran the filter on the host.
func TestNestedRepoFilterNotRun(t *testing.T) {
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			x := newTarget(t, backend)
			nest := nestedRepo(t, x.Box, "nest")
			sandboxtest.WriteFile(t, filepath.Join(nest, ".gitattributes"), "* filter=evil\n")
			testenv.Git(t, x.Home, nest, "config", "filter.evil.clean", "sh -c 'touch "+x.Pwned+"/filter; cat'")
			testenv.Chown(t, x.Repo)
			// Same size, new content: Git must hash the file again, through its filter.
			r := runBounded(t, x.Box, "printf 'y\\n' > nest/x && echo RAN")
			if r.Code != 0 || !strings.Contains(r.Stdout, "RAN") {
				t.Fatalf("session: %s", r)
			}
			if ents, _ := os.ReadDir(x.Pwned); len(ents) > 0 {
				t.Errorf("the nested repository's clean filter ran on the host after the session:\n%s", r)
			}
		})
	}
}

// nestedRepo makes a Git repository with one commit at b.Repo/name, owned by the
// test user, and returns its path.
func nestedRepo(t *testing.T, b *sandboxtest.Box, name string) string {
	t.Helper()
	dir := filepath.Join(b.Repo, name)
	mkUserDir(t, dir)
	testenv.Git(t, b.Home, dir, "init", "-q")
	sandboxtest.WriteFile(t, filepath.Join(dir, "x"), "x\n")
	testenv.Chown(t, dir)
	testenv.Git(t, b.Home, dir, "add", "x")
	testenv.Git(t, b.Home, dir, "commit", "-qm", "n")
	testenv.Chown(t, dir)
	return dir
}

// mkfifoAs makes a FIFO at p owned by the test user.
func mkfifoAs(t *testing.T, p string) error {
	cmd := testenv.Command(t, "/", "mkfifo", p)
	if out, err := cmd.CombinedOutput(); err != nil {
		return &os.PathError{Op: "mkfifo " + string(out), Path: p, Err: err}
	}
	return nil
}

// TestSnapshotNamesWhatItSkips: FIFOs in the Git dir at launch (where Git opens
// nothing by name, so the audit leaves them) are not archived by the metadata
// snapshot, never opened, and named on stderr and in the record.
func TestSnapshotNamesWhatItSkips(t *testing.T) {
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			p := filepath.Join(b.Repo, ".git/objects/planted\nname")
			if err := mkfifoAs(t, p); err != nil {
				t.Fatal(err)
			}
			r := runBounded(t, b, "echo RAN")
			if r.Code != 0 || !strings.Contains(r.Stdout, "RAN") {
				t.Fatalf("launch: %s", r)
			}
			want := `agentbox: snapshot: skipped "` + strings.ReplaceAll(p, "\n", `\n`) + `": a FIFO, not archived`
			if !strings.Contains(r.Stderr, want) {
				t.Errorf("stderr does not say %q:\n%s", want, r.Stderr)
			}
			if rec := lastRecord(t, b); !strings.Contains(rec, "a FIFO, not archived") {
				t.Errorf("the record does not name the skipped FIFO:\n%s", rec)
			}
		})
	}
}
