package bench

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/grantledger"
)

func TestParseScaleSpec(t *testing.T) {
	for in, want := range map[string]ScaleSpec{
		"20":          {Files: 20},
		"1k":          {Files: 1000},
		"100000:1.5G": {Files: 100000, PackBytes: 1.5 * (1 << 30)},
		"1000:300M":   {Files: 1000, PackBytes: 300 << 20},
		"5:0":         {Files: 5},
	} {
		got, err := ParseScaleSpec(in)
		if err != nil || got != want {
			t.Errorf("ParseScaleSpec(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-3", "x", "10:", "10:abc", "10:-1M"} {
		if _, err := ParseScaleSpec(in); err == nil {
			t.Errorf("ParseScaleSpec(%q): no error", in)
		}
	}
}

// TestGenerateScaleRepo generates a small repository of the scaling scenario with
// real git: the tracked files are checked out, the history is one pack at least as
// large as asked, and the history blobs are not in the work tree.
func TestGenerateScaleRepo(t *testing.T) {
	gitBin, err := exec.LookPath("git")
	if err != nil {
		t.Skip("needs git")
	}
	repo := t.TempDir()
	spec := ScaleSpec{Files: 250, PackBytes: 3 << 20}
	if err := generateRepo(gitBin, repo, spec); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("git", "-C", repo, "ls-files").Output()
	if err != nil {
		t.Fatal(err)
	}
	if n := len(strings.Fields(string(out))); n != spec.Files {
		t.Errorf("%d tracked files, want %d", n, spec.Files)
	}
	if _, err := os.Stat(filepath.Join(repo, smallPath(249))); err != nil {
		t.Errorf("work tree: %v", err)
	}
	if _, err := os.Stat(filepath.Join(repo, "history")); err == nil {
		t.Error("history/ is in the work tree")
	}
	packs, _ := filepath.Glob(filepath.Join(repo, ".git", "objects", "pack", "*.pack"))
	if len(packs) != 1 {
		t.Fatalf("%d packs, want 1", len(packs))
	}
	if fi, _ := os.Stat(packs[0]); fi.Size() < spec.PackBytes {
		t.Errorf("pack is %d bytes, want at least %d", fi.Size(), spec.PackBytes)
	}
	freshIndex(t, repo)
	if st, err := exec.Command("git", "-C", repo, "status", "--porcelain").Output(); err != nil || len(st) != 0 {
		t.Errorf("git status --porcelain: %q, %v; want a clean tree", st, err)
	}
}

// freshIndex checks, before anything else runs Git in repo, that its index is as
// a user's usually is: no entry racily clean (written in the index's own second,
// its size smudged to 0), which would make `git status` read the file again.
func freshIndex(t *testing.T, repo string) {
	t.Helper()
	fi, err := os.Stat(filepath.Join(repo, ".git", "index"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("git", "-C", repo, "ls-files", "--debug").Output()
	if err != nil {
		t.Fatal(err)
	}
	var path string
	racy := 0
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(line) > 0 && line[0] != ' ':
			path = line
		case len(f) >= 2 && f[0] == "mtime:":
			s, _, _ := strings.Cut(f[1], ":")
			if sec, err := strconv.ParseInt(s, 10, 64); err != nil || sec >= fi.ModTime().Unix() {
				racy++
			}
		case len(f) >= 2 && f[0] == "size:" && f[1] == "0":
			t.Errorf("%s: size smudged in the index (racily clean)", path)
		}
	}
	if racy > 0 {
		t.Errorf("%d index entries are no older than the index itself (racily clean)", racy)
	}
}

// TestCopyRepoForAgainst checks the --against copy: the same tree and Git status in
// another directory, its work-tree files other inodes (a session of one binary must
// not change the other's repository), its packs hard links of the original's.
func TestCopyRepoForAgainst(t *testing.T) {
	gitBin, err := exec.LookPath("git")
	if err != nil {
		t.Skip("needs git")
	}
	cp, err := exec.LookPath("cp")
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "repo")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	// More objects than fast-import's unpack limit (100), so that it writes a pack.
	if err := generateRepo(gitBin, src, ScaleSpec{Files: 200, PackBytes: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "against", "repo")
	if err := copyRepo(cp, src, dst); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("git", "-C", dst, "status", "--porcelain").CombinedOutput()
	if err != nil || len(out) != 0 {
		t.Fatalf("git status in the copy: %v: %q", err, out)
	}
	same := func(a, b string) bool {
		fa, err1 := os.Stat(a)
		fb, err2 := os.Stat(b)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		return os.SameFile(fa, fb)
	}
	if f := smallPath(3); same(filepath.Join(src, f), filepath.Join(dst, f)) {
		t.Errorf("%s is the same file in both repositories", f)
	}
	packs, _ := filepath.Glob(filepath.Join(src, ".git", "objects", "pack", "*.pack"))
	if len(packs) == 0 {
		t.Fatal("no pack generated")
	}
	for _, p := range packs {
		if !same(p, filepath.Join(dst, ".git", "objects", "pack", filepath.Base(p))) {
			t.Errorf("%s is not hard-linked into the copy", filepath.Base(p))
		}
	}
}

// bench --scale runs git and cp on the host: a git an earlier session could have
// planted, in a directory it was given writable that is on PATH now, must not run.
func TestScaleSkipsPlantedPrograms(t *testing.T) {
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tools := filepath.Join(base, "tools")
	marker := filepath.Join(base, "planted-ran")
	if err := os.MkdirAll(tools, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"git", "cp"} {
		script := "#!/bin/sh\necho " + name + " >> " + marker + "\nexit 1\n"
		if err := os.WriteFile(filepath.Join(tools, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	state := filepath.Join(base, "state")
	t.Setenv("XDG_STATE_HOME", state)
	if err := grantledger.Record(grantledger.StateDir(state, ""), []string{tools}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", tools)
	_, err = RunScale(ScaleConfig{Agentbox: "/bin/true", Specs: []string{"5"}, CacheDir: filepath.Join(base, "cache"), Runs: 1, First: 1, Sessions: 1})
	if data, _ := os.ReadFile(marker); len(data) > 0 {
		t.Errorf("bench --scale ran the planted %s", strings.Fields(string(data)))
	}
	if err == nil || !strings.Contains(err.Error(), "an earlier session was given writable") {
		t.Errorf("RunScale: %v; want the lookup's refusal naming the earlier grant", err)
	}
}
