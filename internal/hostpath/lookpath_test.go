package hostpath

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/grantledger"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// prog writes an executable name into dir (made with mode) and returns its path.
func prog(t *testing.T, dir, name string, mode os.FileMode) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestLookPathSkipsSandboxWritable: every PATH entry a sandbox could have written is
// passed over for the trusted one further down, and the refusal names what was skipped.
func TestLookPathSkipsSandboxWritable(t *testing.T) {
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const name = "agentbox-lookpath-test"
	repo := filepath.Join(base, "repo") // the session's repository (no .git: --repo of a plain dir)
	inRepo := prog(t, filepath.Join(repo, "bin"), name, 0o755)
	other := filepath.Join(base, "other") // another Git working tree, an earlier session's
	if err := os.MkdirAll(filepath.Join(other, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	inOther := prog(t, filepath.Join(other, "tools", "bin"), name, 0o755)
	shared := prog(t, filepath.Join(base, "shared"), name, 0o777)
	linkDir := filepath.Join(base, "links") // a trusted-looking dir whose program links into the repo
	if err := os.MkdirAll(linkDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(inRepo, filepath.Join(linkDir, name)); err != nil {
		t.Fatal(err)
	}
	repoLink := filepath.Join(base, "repo-link") // a symlink to the repository's bin
	if err := os.Symlink(filepath.Join(repo, "bin"), repoLink); err != nil {
		t.Fatal(err)
	}
	writableFile := prog(t, filepath.Join(base, "wfile"), name, 0o755)
	if err := os.Chmod(writableFile, 0o757); err != nil {
		t.Fatal(err)
	}
	good := prog(t, filepath.Join(base, "good"), name, 0o755)

	t.Chdir(filepath.Join(repo, "bin"))
	entries := []string{"", ".", "bin", filepath.Join(repo, "bin"), repoLink, linkDir,
		filepath.Dir(inOther), filepath.Dir(shared), filepath.Dir(writableFile)}
	t.Setenv("PATH", strings.Join(append(entries, filepath.Dir(good)), ":"))
	if got, err := LookPath(name, repo); err != nil || got != good {
		t.Errorf("LookPath = %q, %v; want %s", got, err, good)
	}

	t.Setenv("PATH", strings.Join(entries, ":"))
	_, err = LookPath(name, repo)
	if err == nil {
		t.Fatal("LookPath found a program a sandbox could have written")
	}
	for _, want := range []string{"not found on PATH", "relative PATH entry", "which the sandbox can write", "Git working tree"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	// Without the writable set, the repository's bin is still not trusted once the
	// repository is a Git working tree.
	if err := os.Mkdir(filepath.Join(repo, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", filepath.Join(repo, "bin"))
	if got, err := LookPath(name); err == nil {
		t.Errorf("LookPath without a writable set found %s inside a Git working tree", got)
	}
	if _, err := LookPath("a/b"); err == nil {
		t.Error("LookPath accepted a name with a slash")
	}
}

// BenchmarkLookPath is the cost of finding git on a typical PATH, as the recorder does
// once per session, against os/exec's LookPath for the same name.
func BenchmarkLookPath(b *testing.B) {
	b.Setenv("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	for b.Loop() {
		if _, err := LookPath("git", "/nonexistent/repo"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkExecLookPath(b *testing.B) {
	b.Setenv("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	for b.Loop() {
		if _, err := exec.LookPath("git"); err != nil {
			b.Fatal(err)
		}
	}
}

// TestLookPathSkipsEarlierGrants: a directory an earlier session was given
// writable (the ledger in the environment's state directory) is skipped like the
// session's own, also when the PATH entry only links there, and the refusal says
// which directory and how to trust it again; a damaged ledger refuses every lookup.
func TestLookPathSkipsEarlierGrants(t *testing.T) {
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const name = "agentbox-lookpath-test"
	tools := filepath.Join(base, "tools")
	planted := prog(t, filepath.Join(tools, "bin"), name, 0o755)
	link := filepath.Join(base, "tools-link")
	if err := os.Symlink(filepath.Join(tools, "bin"), link); err != nil {
		t.Fatal(err)
	}
	good := prog(t, filepath.Join(base, "good"), name, 0o755)
	state := filepath.Join(base, "state")
	t.Setenv("XDG_STATE_HOME", state)
	t.Setenv("PATH", strings.Join([]string{filepath.Dir(planted), link, filepath.Dir(good)}, ":"))
	if got, err := LookPath(name); err != nil || got != filepath.Join(filepath.Dir(planted), name) {
		t.Fatalf("before any grant: LookPath = %q, %v; want the first entry's", got, err)
	}
	if err := grantledger.Record(grantledger.StateDir(state, ""), []string{tools}); err != nil {
		t.Fatal(err)
	}
	if got, err := LookPath(name); err != nil || got != good {
		t.Errorf("LookPath = %q, %v; want %s past the earlier grant", got, err, good)
	}
	t.Setenv("PATH", strings.Join([]string{filepath.Dir(planted), link}, ":"))
	_, err = LookPath(name)
	if err == nil {
		t.Fatal("LookPath found a program in a directory an earlier session could write")
	}
	for _, want := range []string{"an earlier session was given writable", "take such a directory off PATH", grantledger.FileName} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	if err := os.WriteFile(grantledger.Path(grantledger.StateDir(state, "")), []byte("not quoted\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", filepath.Dir(good))
	if got, err := LookPath(name); err == nil {
		t.Errorf("LookPath with a damaged ledger found %s", got)
	}
}

// ledgerTemp returns a test directory (its links resolved) and, in it, the state
// directory this process's lookups take the ledger from (XDG_STATE_HOME).
func ledgerTemp(t *testing.T) (base, xdgState string) {
	t.Helper()
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	xdgState = filepath.Join(base, "state")
	t.Setenv("XDG_STATE_HOME", xdgState)
	return base, xdgState
}

// TestLookPathSkipsRenamedGrants: a directory an earlier session was given
// writable is skipped under any name it has later: renamed, below a renamed
// parent, or reached through a link to its new name (a bind mount keeps the
// identity just as well); the refusal names the ledger's entry.
func TestLookPathSkipsRenamedGrants(t *testing.T) {
	base, state := ledgerTemp(t)
	const name = "agentbox-lookpath-test"
	good := prog(t, filepath.Join(base, "good"), name, 0o755)
	tools := filepath.Join(base, "tools")
	prog(t, filepath.Join(tools, "bin"), name, 0o755)
	parent := filepath.Join(base, "parent")
	prog(t, filepath.Join(parent, "granted", "bin"), name, 0o755)
	if err := grantledger.Record(grantledger.StateDir(state, ""), []string{tools, filepath.Join(parent, "granted")}); err != nil {
		t.Fatal(err)
	}
	renamed := filepath.Join(base, "renamed")
	if err := os.Rename(tools, renamed); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(parent, filepath.Join(base, "parent2")); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(renamed, link); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{
		filepath.Join(renamed, "bin"),
		filepath.Join(base, "parent2", "granted", "bin"),
		filepath.Join(link, "bin"),
	} {
		t.Setenv("PATH", dir+":"+filepath.Dir(good))
		if got, err := LookPath(name); err != nil || got != good {
			t.Errorf("PATH=%s: LookPath = %q, %v; want %s past the renamed grant", dir, got, err, good)
		}
		t.Setenv("PATH", dir)
		_, err := LookPath(name)
		if err == nil || !strings.Contains(err.Error(), "under another name now") || !strings.Contains(err.Error(), grantledger.FileName) {
			t.Errorf("PATH=%s: LookPath = %v; want a refusal naming the renamed grant and the ledger", dir, err)
		}
	}
}

// TestLookPathSkipsSecondNames: run as the test user, a program of the user's with
// a second name (a hard link) on the file system of a directory an earlier session
// was given writable is skipped, as the session could have written it through a
// name there (~/bin/git hard-linked to ~/tools/bin/git, ~/tools once granted); the
// same program with one name is found, and so is one with two names when every
// grant lies on another file system. Root is not asked this (SharedName).
func TestLookPathSkipsSecondNames(t *testing.T) {
	if !testenv.AsTestUser(t) {
		return
	}
	base, state := ledgerTemp(t)
	const name = "agentbox-lookpath-test"
	tools := filepath.Join(base, "tools")
	granted := prog(t, tools, name, 0o755)
	bin := filepath.Join(base, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(granted, filepath.Join(bin, name)); err != nil {
		t.Fatal(err)
	}
	good := prog(t, filepath.Join(base, "good"), name, 0o755)
	t.Setenv("PATH", bin+":"+filepath.Dir(good))
	if got, err := LookPath(name); err != nil || got != filepath.Join(bin, name) {
		t.Fatalf("before any grant: LookPath = %q, %v; want %s", got, err, filepath.Join(bin, name))
	}
	// A grant on another file system (tmpfs) says nothing of this one's names.
	shm, err := os.MkdirTemp("/dev/shm", "agentbox-lookpath-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(shm)
	if err := grantledger.Record(grantledger.StateDir(state, ""), []string{shm}); err != nil {
		t.Fatal(err)
	}
	if got, err := LookPath(name); err != nil || got != filepath.Join(bin, name) {
		t.Errorf("with a grant on another file system: LookPath = %q, %v; want %s", got, err, filepath.Join(bin, name))
	}
	if err := grantledger.Record(grantledger.StateDir(state, ""), []string{tools}); err != nil {
		t.Fatal(err)
	}
	if got, err := LookPath(name); err != nil || got != good {
		t.Errorf("LookPath = %q, %v; want %s past the second name of a granted file", got, err, good)
	}
	t.Setenv("PATH", bin)
	if _, err := LookPath(name); err == nil || !strings.Contains(err.Error(), "2 names (hard links)") || !strings.Contains(err.Error(), grantledger.FileName) {
		t.Errorf("LookPath = %v; want a refusal naming the hard links and the ledger", err)
	}
	// One name again: found.
	if err := os.Remove(granted); err != nil {
		t.Fatal(err)
	}
	if got, err := LookPath(name); err != nil || got != filepath.Join(bin, name) {
		t.Errorf("with one name: LookPath = %q, %v; want %s", got, err, filepath.Join(bin, name))
	}
}

// TestLookPathSkipsLinksPlantedInGrants: a session cannot plant a program outside
// what it may write, but it can plant a symbolic link there to any program of the
// host, and the operator's PATH reaching that link (the grant itself on PATH after a
// rename, or a link of the operator's own into the grant) would make the launcher
// run the program the session chose, with the argv meant for another. A program
// reached through a link that lies in the session's writable directories, in an
// earlier grant by its name or by its identity, is skipped like one that lies there.
func TestLookPathSkipsLinksPlantedInGrants(t *testing.T) {
	base, state := ledgerTemp(t)
	const name = "agentbox-lookpath-test"
	good := prog(t, filepath.Join(base, "good"), name, 0o755)
	chosen := prog(t, filepath.Join(base, "elsewhere"), "sh", 0o755) // the host program the session points at
	link := func(target, at string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(at), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, at); err != nil {
			t.Fatal(err)
		}
	}
	// Granted by name, then renamed: the session's link in its bin directory.
	tools := filepath.Join(base, "tools")
	link(chosen, filepath.Join(tools, "bin", name))
	// Granted, still at its name: the session's link, reached through the
	// operator's link ~/bin/NAME -> tools2/NAME.
	tools2 := filepath.Join(base, "tools2")
	link(chosen, filepath.Join(tools2, name))
	link(filepath.Join(tools2, name), filepath.Join(base, "bin", name))
	// The session's directory link: the operator's PATH names dots/bin, dots
	// granted, and the session turned dots/bin into a link to the host's bin.
	dots := filepath.Join(base, "dots")
	link(filepath.Dir(chosen), filepath.Join(dots, "bin"))
	// This session's writable directory, reached through the operator's link.
	repo := filepath.Join(base, "repo")
	link(chosen, filepath.Join(repo, name))
	link(filepath.Join(repo, name), filepath.Join(base, "bin2", name))
	if err := grantledger.Record(grantledger.StateDir(state, ""), []string{tools, tools2}); err != nil {
		t.Fatal(err)
	}
	renamed := filepath.Join(base, "renamed")
	if err := os.Rename(tools, renamed); err != nil {
		t.Fatal(err)
	}
	dotsRenamed := filepath.Join(base, "dots-renamed")
	if err := os.Rename(dots, dotsRenamed); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ dir, want string }{
		{filepath.Join(renamed, "bin"), "under another name now"},
		{filepath.Join(base, "bin"), quote(tools2)},
		{filepath.Join(base, "bin2"), "which the sandbox can write"},
	} {
		t.Setenv("PATH", c.dir+":"+filepath.Dir(good))
		if got, err := LookPath(name, repo); err != nil || got != good {
			t.Errorf("PATH=%s: LookPath = %q, %v; want %s past the planted link", c.dir, got, err, good)
		}
		t.Setenv("PATH", c.dir)
		if got, err := LookPath(name, repo); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("PATH=%s: LookPath = %q, %v; want a refusal with %q", c.dir, got, err, c.want)
		}
	}
	// The directory link: the program there is "sh", so look it up by that name.
	if err := grantledger.Record(grantledger.StateDir(state, ""), []string{dotsRenamed}); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dotsRenamed, dots); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", filepath.Join(dots, "bin"))
	if got, err := LookPath("sh"); err == nil || !strings.Contains(err.Error(), quote(dotsRenamed)) {
		t.Errorf("PATH=%s: LookPath = %q, %v; want a refusal naming the grant whose link it passes", filepath.Join(dots, "bin"), got, err)
	}
	// Debian's alternatives under etckeeper: /usr/bin/awk -> /etc/alternatives/awk
	// -> /usr/bin/mawk, with /etc a Git working tree no session was given. Found.
	etc := filepath.Join(base, "etc")
	if err := os.MkdirAll(filepath.Join(etc, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	link(chosen, filepath.Join(etc, "alternatives", "sh"))
	link(filepath.Join(etc, "alternatives", "sh"), filepath.Join(base, "usrbin", "sh"))
	t.Setenv("PATH", filepath.Join(base, "usrbin"))
	if got, err := LookPath("sh"); err != nil || got != filepath.Join(base, "usrbin", "sh") {
		t.Errorf("through alternatives in a Git working tree: LookPath = %q, %v; want it found", got, err)
	}
}
