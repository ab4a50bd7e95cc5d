package policy

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestKeep: what --keep and --keep-agent accept, how they name it, and what they
// refuse (the behaviour table runs the same refusals through the binary).
func TestKeep(t *testing.T) {
	home, repo := tree(t)
	for _, d := range []string{".claude", ".codex", "dir/sub"} {
		if err := os.MkdirAll(filepath.Join(home, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	alias := filepath.Join(filepath.Dir(home), "alias")
	if err := os.Symlink(home, alias); err != nil {
		t.Fatal(err)
	}
	base := Options{Cwd: repo, Home: home}
	cases := []struct {
		name    string
		mod     func(o *Options)
		keep    []Kept
		refusal string
	}{
		{"tilde and absolute", func(o *Options) { o.Keep = []string{"~/dir/sub", home + "/dir"} },
			[]Kept{{Path: home + "/dir/sub", Dir: true, From: "--keep"}, {Path: home + "/dir", Dir: true, From: "--keep"}}, ""},
		{"HOME given through a link", func(o *Options) { o.Home = alias; o.Keep = []string{alias + "/dir"} },
			[]Kept{{Path: home + "/dir", Dir: true, From: "--keep"}}, ""},
		{"duplicates once", func(o *Options) { o.Keep = []string{"~/.codex"}; o.KeepAgent = []string{"codex"} },
			[]Kept{{Path: home + "/.codex", Dir: true, From: "--keep-agent codex"}}, ""},
		{"claude preset creates the missing state file", func(o *Options) { o.KeepAgent = []string{"claude"} },
			[]Kept{{Path: home + "/.claude", Dir: true, From: "--keep-agent claude"},
				{Path: home + "/.claude.json", Create: true, Init: "{}\n", From: "--keep-agent claude"}}, ""},
		{"no HOME", func(o *Options) { o.Home = ""; o.Keep = []string{"/x"} }, nil, "no HOME overlay"},
		{"relative to cwd", func(o *Options) { o.Keep = []string{"../dir"} }, []Kept{{Path: home + "/dir", Dir: true, From: "--keep"}}, ""},
		{"preset path of the wrong type", func(o *Options) {
			os.WriteFile(filepath.Join(home, "f"), nil, 0o644)
			o.KeepAgent = []string{"codex"}
			os.Remove(filepath.Join(home, ".codex"))
			os.WriteFile(filepath.Join(home, ".codex"), nil, 0o644)
		}, nil, "is not a directory"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := base
			c.mod(&o)
			p, err := New(o)
			if c.refusal != "" {
				if err == nil || !strings.Contains(err.Error(), c.refusal) {
					t.Fatalf("want refusal %q, got %v", c.refusal, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(p.Keep, c.keep) {
				t.Errorf("kept %+v, want %+v", p.Keep, c.keep)
			}
		})
	}
}

// linkedClaude is tree's HOME and repository with ~/.claude a link to dots/claude
// (target), which holds plugins.
func linkedClaude(t *testing.T) (home, repo, target string) {
	t.Helper()
	home, repo = tree(t)
	target = filepath.Join(home, "dots", "claude")
	if err := os.MkdirAll(filepath.Join(target, "plugins"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("dots/claude", filepath.Join(home, ".claude")); err != nil {
		t.Fatal(err)
	}
	return home, repo, target
}

// TestKeepLinkedAgentDir: an agent's directory that is a link (~/.claude ->
// dots/claude), kept by its target, gets the preset's read-only and private
// directories at the target as a kept ~/.claude does.
func TestKeepLinkedAgentDir(t *testing.T) {
	home, repo, target := linkedClaude(t)
	p, err := New(Options{Cwd: repo, Home: home, Keep: []string{"~/dots/claude"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"plugins", "hooks", "skills"} {
		if !slices.Contains(p.KeepReadOnly, filepath.Join(target, d)) {
			t.Errorf("%s not read-only inside: %v", d, p.KeepReadOnly)
		}
	}
	if _, err := New(Options{Cwd: repo, Home: home, Keep: []string{"~/dots/claude/plugins"}}); err == nil {
		t.Errorf("a kept path in the linked directory's plugins is accepted")
	}
}

// TestAgentSurfaceResolvesEachDirOnce: the agents' read-only and private paths
// that share a directory (~/.claude's) share its resolution, with the same result
// as TestKeepLinkedAgentDir's: each resolution is a lstat per component of HOME's
// path, on every launch.
func TestAgentSurfaceResolvesEachDirOnce(t *testing.T) {
	home, repo, target := linkedClaude(t)
	seen := map[string]int{}
	defer func(f func(string) (string, error)) { evalAgentDir = f }(evalAgentDir)
	evalAgentDir = func(dir string) (string, error) {
		seen[dir]++
		return filepath.EvalSymlinks(dir)
	}
	p, err := New(Options{Cwd: repo, Home: home, Keep: []string{"~/dots/claude"}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(p.KeepReadOnly, filepath.Join(target, "plugins")) {
		t.Errorf("plugins not read-only inside: %v", p.KeepReadOnly)
	}
	if len(seen) == 0 {
		t.Fatal("no agent directory resolved")
	}
	for dir, n := range seen {
		if n != 1 {
			t.Errorf("%s resolved %d times, want once", dir, n)
		}
	}
}

// TestKeepWayToReadOnly: a kept path that holds a linked agent's directory
// deeper down (--keep ~/src with ~/.claude -> src/dotfiles/claude) keeps every
// directory on the way to its read-only parts as a kept path of its own (a mount
// point inside, which the session cannot rename away with the read-only binds
// under it); a kept ~/.claude adds nothing.
func TestKeepWayToReadOnly(t *testing.T) {
	home, repo := tree(t)
	src := filepath.Join(home, "src")
	target := filepath.Join(src, "dotfiles", "claude")
	if err := os.MkdirAll(filepath.Join(target, "plugins"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("src/dotfiles/claude", filepath.Join(home, ".claude")); err != nil {
		t.Fatal(err)
	}
	p, err := New(Options{Cwd: repo, Home: home, Keep: []string{"~/src"}})
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, k := range p.Keep {
		kept = append(kept, k.Path)
	}
	want := []string{src, filepath.Join(src, "dotfiles"), target}
	if !slices.Equal(kept, want) {
		t.Errorf("kept %q, want %q", kept, want)
	}
	if !slices.Contains(p.KeepReadOnly, filepath.Join(target, "plugins")) {
		t.Errorf("plugins not read-only inside: %v", p.KeepReadOnly)
	}
	p, err = New(Options{Cwd: repo, Home: home, Keep: []string{"~/src/dotfiles/claude"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Keep) != 1 {
		t.Errorf("a kept agent directory: kept %v, want itself alone", p.Keep)
	}
}
