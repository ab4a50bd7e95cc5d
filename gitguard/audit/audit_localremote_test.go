package audit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLocalRemoteOutsideRepository: a nested repository whose remote names a local
// path outside the repository (absolute, file://, ../.., or reached by a
// url.insteadOf) is reported and moved aside: the operator's next git fetch there,
// run by real Git below, copies another repository's objects (here one the
// session could not read) into the working tree, where the next session reads
// them. Remotes inside the repository, on the network, over ssh or in the
// repository's own config are not.
func TestLocalRemoteOutsideRepository(t *testing.T) {
	outsideRepo := func(f *fixture) (dir, commit string) {
		dir = filepath.Join(f.Root, "private")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		f.Git(dir, "init", "-q", "-b", "main")
		if err := os.WriteFile(filepath.Join(dir, "secret"), []byte("hidden\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		f.Git(dir, "add", "secret")
		f.Git(dir, "commit", "-q", "-m", "private")
		return dir, f.Git(dir, "rev-parse", "HEAD")
	}
	nested := func(f *fixture) string {
		sub := filepath.Join(f.Repo, "sub")
		if err := os.Mkdir(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		f.Git(sub, "init", "-q", "-b", "main")
		return sub
	}
	reported := []struct {
		name string
		set  func(f *fixture, sub, private string) // as the session would, with real Git
		why  string
		push bool // the danger is the operator's push: it writes into the outside repository
	}{
		{"absolute path", func(f *fixture, sub, private string) { f.Git(sub, "remote", "add", "origin", private) }, "names a local path outside the repository", false},
		{"file URL", func(f *fixture, sub, private string) { f.Git(sub, "remote", "add", "origin", "file://"+private) }, "names a local path outside the repository", false},
		{"relative path", func(f *fixture, sub, private string) { f.Git(sub, "remote", "add", "origin", "../../private") }, "names a local path outside the repository", false},
		{"push URL", func(f *fixture, sub, private string) {
			f.Git(sub, "remote", "add", "origin", "https://example.invalid/x.git")
			f.Git(sub, "config", "remote.origin.pushurl", private)
		}, "names a local path outside the repository", true},
		{"url.insteadOf", func(f *fixture, sub, private string) {
			f.Git(sub, "remote", "add", "origin", "https://example.invalid/x.git")
			f.Git(sub, "config", "url."+private+".insteadOf", "https://example.invalid/x.git")
		}, "rewrites URLs to a local path outside the repository", false},
	}
	for _, c := range reported {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			private, commit := outsideRepo(f)
			base := f.scan()
			sub := nested(f)
			c.set(f, sub, private)
			config := filepath.Join(sub, ".git/config")
			fs := Compare(base, f.scan())
			fd := findingAt(fs, config)
			if fd == nil || !strings.Contains(fd.String(), c.why) {
				t.Fatalf("no finding saying %q for %s; findings: %v", c.why, config, fs)
			}
			// What the finding guards against, by real Git: the operator's fetch
			// copies the outside repository's commit in; a push writes out there.
			if c.push {
				f.Git(sub, "commit", "-q", "--allow-empty", "-m", "planted")
				f.Git(sub, "push", "-q", "origin", "HEAD:refs/heads/planted")
				if got := f.Git(private, "rev-parse", "planted"); got != f.Git(sub, "rev-parse", "HEAD") {
					t.Fatalf("real Git's push did not write into %s: %q", private, got)
				}
			} else {
				f.Git(sub, "fetch", "-q", "origin")
				if got := f.Git(sub, "cat-file", "-t", commit); got != "commit" {
					t.Fatalf("real Git's fetch did not copy %s in: %q", commit, got)
				}
			}
			Quarantine(fs, "TEST")
			if fd = findingAt(fs, config); fd.MoveErr != nil || fd.Moved == "" {
				t.Fatalf("quarantine: %+v", fd)
			}
		})
	}

	t.Run("not reported", func(t *testing.T) {
		f := newFixture(t)
		private, _ := outsideRepo(f)
		// The repository's own config (read-only in the session) may name a local
		// path: the user cloned it from one.
		f.Git(f.Repo, "remote", "add", "upstream", private)
		base := f.scan()
		other := nested(f)
		if err := os.Rename(other, filepath.Join(f.Repo, "other")); err != nil {
			t.Fatal(err)
		}
		sub := nested(f)
		for name, url := range map[string]string{
			"inside":   filepath.Join(f.Repo, "other"),
			"relative": "../other",
			"https":    "https://example.invalid/x.git",
			"ssh":      "git@example.invalid:x.git",
			"ssh-url":  "ssh://example.invalid/x.git",
		} {
			f.Git(sub, "remote", "add", name, url)
		}
		if fs := Compare(base, f.scan()); len(fs) != 0 {
			t.Errorf("findings for remotes that stay inside or are not local: %v", fs)
		}
	})
}
