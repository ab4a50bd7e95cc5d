package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/hostpath"
)

// tree builds HOME/repo/sub with a .git dir in repo, and returns canonical paths.
func tree(t *testing.T) (home, repo string) {
	t.Helper()
	home = homeDir(t)
	repo = filepath.Join(home, "repo")
	for _, d := range []string{filepath.Join(repo, ".git"), filepath.Join(repo, "sub", "dir")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return home, repo
}

// homeDir is a fresh canonical directory that may be HOME: not below /tmp, which
// t.TempDir usually is.
func homeDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("/var/tmp", "agentbox-policy-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	d, err = filepath.EvalSymlinks(d)
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(d, "home")
}

func TestRepoRules(t *testing.T) {
	home, repo := tree(t)
	file := filepath.Join(repo, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(home, "link-to-repo")
	if err := os.Symlink(repo, link); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		repo    string
		want    string // canonical repo, or "" for a refusal
		refusal string
	}{
		{repo, repo, ""},
		{link, repo, ""}, // symlinks resolved before any check
		{filepath.Join(repo, "sub"), filepath.Join(repo, "sub"), ""},
		{"sub/dir", filepath.Join(repo, "sub", "dir"), ""}, // relative to cwd
		{filepath.Join(repo, "missing"), "", "does not exist"},
		{file, "", "is not a directory"},
		{"/", "", "root directory"},
		{home, "", "is " + home},
		{filepath.Dir(home), "", "contains " + home},
		{"/tmp", "", "is /tmp"},
		{"/run", "", "is /run"},
		{"/proc", "", "is /proc"},
		{"/dev", "", "is /dev"},
		{"/proc/sys", "", "pseudo-filesystem"},
		{"/sys/kernel", "", "pseudo-filesystem"},
		{"/dev/shm", "", "pseudo-filesystem"},
		{"a\x00b", "", "NUL"},
	}
	for _, c := range cases {
		p, err := New(Options{Repo: c.repo, Cwd: repo, Home: home})
		if c.refusal != "" {
			if err == nil || !strings.Contains(err.Error(), c.refusal) {
				t.Errorf("repo %q: got %v, want refusal with %q", c.repo, err, c.refusal)
			}
			if err != nil && strings.Contains(err.Error(), "\n") {
				t.Errorf("repo %q: multi-line message %q", c.repo, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("repo %q: %v", c.repo, err)
			continue
		}
		if p.Repo != c.want {
			t.Errorf("repo %q: resolved %q, want %q", c.repo, p.Repo, c.want)
		}
	}
}

func TestDefaults(t *testing.T) {
	home, repo := tree(t)
	sub := filepath.Join(repo, "sub", "dir")
	p, err := New(Options{Cwd: sub, Home: home, Shell: "/bin/zsh"})
	if err != nil {
		t.Fatal(err)
	}
	if p.Repo != repo || p.Workdir != sub {
		t.Errorf("repo %q workdir %q, want Git top level %q and cwd %q", p.Repo, p.Workdir, repo, sub)
	}
	if p.Command[0] != "/bin/zsh" || p.Backend != BackendNative || p.Home != home {
		t.Errorf("defaults: %+v", p)
	}
	if p.CacheDir != filepath.Join(home, ".cache/agentbox") || p.StateDir != filepath.Join(home, ".local/state/agentbox") {
		t.Errorf("dirs: %q %q", p.CacheDir, p.StateDir)
	}
	// Outside any work tree the repo is cwd; from outside the repo the workdir is the repo.
	p, err = New(Options{Cwd: home, Home: home, Repo: repo, XDGCacheHome: "/x/cache", XDGStateHome: "relative"})
	if err != nil {
		t.Fatal(err)
	}
	if p.Workdir != repo || p.Command[0] != "/bin/bash" || p.CacheDir != "/x/cache/agentbox" || p.StateDir != filepath.Join(home, ".local/state/agentbox") {
		t.Errorf("got %+v", p)
	}
	if _, err := New(Options{Cwd: home, Home: home, Repo: repo, Backend: "docker"}); err == nil {
		t.Error("unknown backend accepted")
	}
	if _, err := New(Options{Cwd: "relative", Home: home}); err == nil {
		t.Error("relative cwd accepted")
	}
	// No HOME: no overlay, and --disk-tmp has nowhere to go.
	if p, err := New(Options{Cwd: repo, Repo: repo}); err != nil || p.Home != "" {
		t.Errorf("no HOME: %v %+v", err, p)
	}
	if _, err := New(Options{Cwd: repo, Repo: repo, DiskTmp: true}); err == nil {
		t.Error("--disk-tmp without HOME or XDG_CACHE_HOME accepted")
	}
}

func FuzzRepoRules(f *testing.F) {
	for _, s := range []string{"/", "/tmp", "/home/u", "/home/u/repo", "..", "a/../../b", "/proc/self/root", "\xff\xfe", strings.Repeat("a/", 300)} {
		f.Add(s)
	}
	home := homeDir(f)
	if err := os.Mkdir(home, 0o755); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, repo string) {
		p, err := New(Options{Repo: repo, Cwd: home, Home: home})
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("multi-line refusal %q", err)
			}
			return
		}
		// Whatever was accepted is canonical, a directory, and keeps the rules.
		if p.Repo == "/" || hostpath.Within(home, p.Repo) || hostpath.Within("/tmp", p.Repo) || hostpath.Within("/proc", p.Repo) {
			t.Fatalf("accepted %q as %q", repo, p.Repo)
		}
		if c, err := filepath.EvalSymlinks(p.Repo); err != nil || c != p.Repo {
			t.Fatalf("not canonical: %q", p.Repo)
		}
	})
}

// TestHomeRules: a HOME that is, contains or lies in a tree the sandbox replaces with
// a private mount is refused with that reason; "/" means no overlay.
func TestHomeRules(t *testing.T) {
	home, repo := tree(t)
	inTmp, err := os.MkdirTemp("/tmp", "agentbox-home-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(inTmp)
	link := filepath.Join(filepath.Dir(home), "home-link")
	if err := os.Symlink("/run", link); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ home, want string }{
		{"/tmp", "is /tmp"},
		{"/tmp/", "is /tmp"},
		{"/run", "is /run"},
		{inTmp, "lies inside /tmp"},
		{"/dev/shm", "lies inside /dev"},
		{"/dev", "is /dev"},
		{"/proc/self", "lies inside /proc"},
		{"/sys/kernel", "lies inside /sys"},
		{link, "resolves to /run, which is /run"},
	} {
		_, err := New(Options{Cwd: repo, Repo: repo, Home: c.home})
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "private mount") {
			t.Errorf("HOME=%s: %v, want a refusal saying %q", c.home, err, c.want)
		}
	}
	for _, ok := range []string{"/", home} {
		if _, err := New(Options{Cwd: repo, Repo: repo, Home: ok}); err != nil {
			t.Errorf("HOME=%s refused: %v", ok, err)
		}
	}
}

func TestAllowNet(t *testing.T) {
	home, repo := tree(t)
	p, err := New(Options{Cwd: repo, Home: home, AllowNet: []string{"@npm", "example.com:443"}})
	if err != nil || len(p.AllowNet) != 2 || p.Offline {
		t.Errorf("--allow-net: %v %+v", err, p)
	}
	for _, c := range []struct {
		opts Options
		want string
	}{
		{Options{AllowNet: []string{"example.com"}, Offline: true}, "--allow-net: goes against --offline"},
		{Options{AllowNet: []string{"@nope"}}, "--allow-net @nope: no such preset"},
		{Options{AllowNet: []string{"a\nb"}}, `--allow-net "a\nb": not a host name`},
	} {
		c.opts.Cwd, c.opts.Home = repo, home
		if _, err := New(c.opts); err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.opts.AllowNet, err, c.want)
		}
	}
}
