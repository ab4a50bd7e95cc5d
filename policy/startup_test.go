package policy

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestStartupFiles: the start-up files that resolve into the repository are in the
// plan's data with the directories on their way, a missing one's directory is taken
// instead (but the repository's top is refused), one that merely lies beside the
// repository is not, and --read-only (nothing writable to protect it from) lists none.
func TestStartupFiles(t *testing.T) {
	home, repo := tree(t)
	writeHomeFiles(t, repo, map[string]string{"shell/bash/rc": "x", "zsh/.zshrc": "x"})
	writeHomeFiles(t, home, map[string]string{"outside/profile": "x"})
	for link, target := range map[string]string{".bashrc": "repo/shell/bash/rc", ".profile": "outside/profile"} {
		if err := os.Symlink(target, filepath.Join(home, link)); err != nil {
			t.Fatal(err)
		}
	}
	env := []string{"ZDOTDIR=" + filepath.Join(repo, "zsh")}
	p, err := New(Options{Cwd: repo, Repo: repo, Home: home, Environ: env})
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, f := range p.Startup {
		paths = append(paths, f.Path)
		if f.Grant != repo {
			t.Errorf("%s: grant %s", f.Path, f.Grant)
		}
		if f.Path == filepath.Join(repo, "shell/bash/rc") && !slices.Equal(f.Pins, []string{filepath.Join(repo, "shell"), filepath.Join(repo, "shell/bash")}) {
			t.Errorf("pins on the way to ~/.bashrc: %v", f.Pins)
		}
	}
	// zsh's missing files make their directory read-only, which holds .zshrc.
	if want := []string{filepath.Join(repo, "shell/bash/rc"), filepath.Join(repo, "zsh")}; !slices.Equal(paths, want) {
		t.Errorf("start-up files %v, want %v", paths, want)
	}
	if n := p.StartupNotices(); len(n) != 2 || !strings.Contains(n[0], "~/.bashrc leads into the writable") {
		t.Errorf("notices %q", n)
	}
	p, err = New(Options{Cwd: repo, Repo: repo, Home: home, Environ: env, ReadOnly: true})
	if err != nil || len(p.Startup) != 0 {
		t.Errorf("--read-only: %v, %v", p.Startup, err)
	}
	_, err = New(Options{Cwd: repo, Repo: repo, Home: home, Environ: []string{"ZDOTDIR=" + repo}})
	if err == nil || !strings.Contains(err.Error(), "does not exist in the writable") {
		t.Errorf("ZDOTDIR at the repository's top with its files missing: %v", err)
	}
}

// BenchmarkResolveStartup is what finding the start-up files in the grants adds to
// every launch: a look at each of the audit's start-up paths, one lstat a
// component, in a HOME with two of them linked into the repository.
func BenchmarkResolveStartup(b *testing.B) {
	home := homeDir(b)
	repo := filepath.Join(home, "repo")
	if err := os.MkdirAll(filepath.Join(repo, "fish"), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "bashrc"), nil, 0o644); err != nil {
		b.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(home, ".config"), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.Symlink("repo/bashrc", filepath.Join(home, ".bashrc")); err != nil {
		b.Fatal(err)
	}
	if err := os.Symlink("../repo/fish", filepath.Join(home, ".config/fish")); err != nil {
		b.Fatal(err)
	}
	p := &Policy{Home: home, Repo: repo}
	opts := Options{Environ: []string{}}
	for b.Loop() {
		if err := resolveStartup(p, opts); err != nil || len(p.Startup) != 2 {
			b.Fatalf("%v %v", p.Startup, err)
		}
	}
}

// TestDedupStartup: an entry inside a directory already read-only is dropped, even
// when a sibling whose name sorts between them ("fish-x") came in between.
func TestDedupStartup(t *testing.T) {
	got := dedupStartup([]StartupFile{{Path: "/r/fish/config.fish"}, {Path: "/r/fish-x"}, {Path: "/r/fish", Dir: true}, {Path: "/r/fish-x"}})
	var paths []string
	for _, f := range got {
		paths = append(paths, f.Path)
	}
	if want := []string{"/r/fish", "/r/fish-x"}; !slices.Equal(paths, want) {
		t.Errorf("dedupStartup: %v, want %v", paths, want)
	}
}

// TestStartupDotDotAfterLink: a ".." in $ZDOTDIR or in a symlink's target is taken
// after the symlink before it, as the kernel takes it: $HOME/zl/.. with zl -> the
// repository's zdot/sub is zdot, whose .zshrc zsh runs — not $HOME, which a
// lexical clean of the path makes of it.
func TestStartupDotDotAfterLink(t *testing.T) {
	home, repo := tree(t)
	writeHomeFiles(t, repo, map[string]string{"zdot/sub/x": "x", "zdot/.zshrc": "x", ".bashrc": "x", "zsh/x": "x"})
	for link, target := range map[string]string{
		"zl": "repo/zdot/sub", "top": "repo/zsh",
		// ~/.bashrc -> top/../.bashrc is the repository's .bashrc; a lexical clean
		// made it ~/.bashrc itself, a loop, and passed it over.
		".bashrc": "top/../.bashrc",
	} {
		if err := os.Symlink(target, filepath.Join(home, link)); err != nil {
			t.Fatal(err)
		}
	}
	for _, zdotdir := range []string{filepath.Join(home, "zl") + "/..", filepath.Join(home, "zl") + "/../"} {
		p, err := New(Options{Cwd: repo, Repo: repo, Home: home, Environ: []string{"ZDOTDIR=" + zdotdir}})
		if err != nil {
			t.Fatal(err)
		}
		var paths []string
		for _, f := range p.Startup {
			paths = append(paths, f.Path)
		}
		if want := []string{filepath.Join(repo, ".bashrc"), filepath.Join(repo, "zdot")}; !slices.Equal(paths, want) {
			t.Errorf("ZDOTDIR=%s: start-up files %v, want %v", zdotdir, paths, want)
		}
	}
	// $HOME/top/.. is the repository's top, where zsh's missing files could be
	// created: refused, as ZDOTDIR=REPO is.
	_, err := New(Options{Cwd: repo, Repo: repo, Home: home, Environ: []string{"ZDOTDIR=" + filepath.Join(home, "top") + "/.."}})
	if err == nil || !strings.Contains(err.Error(), "does not exist in the writable") {
		t.Errorf("ZDOTDIR=$HOME/top/..: %v", err)
	}
}

// TestStartupHardLinks: a start-up file with another name is refused where that
// name can be in a writable grant: a read-only bind covers one name of an inode.
// ~/.bashrc hard-linked into the repository (the session would write the real
// one), and a file in the repository made read-only with a second name beside it.
func TestStartupHardLinks(t *testing.T) {
	home, repo := tree(t)
	writeHomeFiles(t, repo, map[string]string{"dots/bashrc": "x", "dots/zshrc": "x"})
	if err := os.Link(filepath.Join(repo, "dots/bashrc"), filepath.Join(home, ".bashrc")); err != nil {
		t.Fatal(err)
	}
	_, err := New(Options{Cwd: repo, Repo: repo, Home: home, Environ: []string{}})
	if err == nil || !strings.Contains(err.Error(), "~/.bashrc") || !strings.Contains(err.Error(), "2 names (hard links) on the file system of the writable") {
		t.Errorf("~/.bashrc hard-linked into the repository: %v", err)
	}
	if err := os.Remove(filepath.Join(home, ".bashrc")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("repo/dots/zshrc", filepath.Join(home, ".zshrc")); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Options{Cwd: repo, Repo: repo, Home: home, Environ: []string{}}); err != nil {
		t.Fatalf("a start-up file of one name: %v", err)
	}
	if err := os.Link(filepath.Join(repo, "dots/zshrc"), filepath.Join(repo, "other")); err != nil {
		t.Fatal(err)
	}
	_, err = New(Options{Cwd: repo, Repo: repo, Home: home, Environ: []string{}})
	if err == nil || !strings.Contains(err.Error(), "~/.zshrc") || !strings.Contains(err.Error(), "which has 2 names (hard links)") {
		t.Errorf("a start-up file in the repository with a second name: %v", err)
	}
	// A second name outside every grant's file system is no way in: only HOME's
	// own copy would change, and that is the overlay's.
	if _, err := New(Options{Cwd: repo, Repo: repo, Home: home, Environ: []string{}, ReadOnly: true}); err != nil {
		t.Errorf("--read-only (no writable grant): %v", err)
	}
}

// TestStartupXDG: $XDG_CONFIG_HOME and $XDG_DATA_HOME move fish's files, the
// autostart entries, the user's systemd units and desktop entries out of ~/.config
// and ~/.local/share; in the repository they are read-only like ~/.config's. Here
// most of them are missing, so the directories that would hold them are taken.
func TestStartupXDG(t *testing.T) {
	home, repo := tree(t)
	writeHomeFiles(t, repo, map[string]string{"xdg/config/fish/config.fish": "x", "xdg/share/applications/a.desktop": "x"})
	env := []string{"XDG_CONFIG_HOME=" + filepath.Join(repo, "xdg/config"), "XDG_DATA_HOME=" + filepath.Join(repo, "xdg/share")}
	p, err := New(Options{Cwd: repo, Repo: repo, Home: home, Environ: env})
	if err != nil {
		t.Fatal(err)
	}
	var named []string
	for _, f := range p.Startup {
		named = append(named, f.Path)
	}
	if want := []string{filepath.Join(repo, "xdg/config"), filepath.Join(repo, "xdg/share")}; !slices.Equal(named, want) {
		t.Errorf("start-up files %v, want %v", named, want)
	}
	// The repository as $XDG_CONFIG_HOME, without fish's or autostart's directory:
	// the session could create them at its top.
	_, err = New(Options{Cwd: repo, Repo: repo, Home: home, Environ: []string{"XDG_CONFIG_HOME=" + repo}})
	if err == nil || !strings.Contains(err.Error(), "$XDG_CONFIG_HOME/") || !strings.Contains(err.Error(), "does not exist in the writable") {
		t.Errorf("XDG_CONFIG_HOME at the repository's top: %v", err)
	}
}

// TestStartupSpecialFile: a start-up file in the repository that is a named pipe
// runs nothing now, but the session could replace it with a script: refused.
func TestStartupSpecialFile(t *testing.T) {
	home, repo := tree(t)
	if err := syscall.Mkfifo(filepath.Join(repo, "sub/bashrc"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("repo/sub/bashrc", filepath.Join(home, ".bashrc")); err != nil {
		t.Fatal(err)
	}
	_, err := New(Options{Cwd: repo, Repo: repo, Home: home, Environ: []string{}})
	if err == nil || !strings.Contains(err.Error(), "~/.bashrc") || !strings.Contains(err.Error(), "which is a FIFO") {
		t.Errorf("~/.bashrc leading to a named pipe in the repository: %v", err)
	}
}

// TestStartupDirEscape: a start-up directory in the repository is read-only inside,
// which keeps nothing that a symlink in it leads to elsewhere in the repository, nor
// a file in it with a second name there: both refused. A link inside it, or out of
// every grant, is fine.
func TestStartupDirEscape(t *testing.T) {
	home, repo := tree(t)
	writeHomeFiles(t, repo, map[string]string{"fish/conf.d/own.fish": "x", "shared/a.fish": "x", "fish/b.fish": "x"})
	writeHomeFiles(t, home, map[string]string{"outside.fish": "x"})
	for link, target := range map[string]string{
		filepath.Join(home, ".config/fish"):             "../repo/fish",
		filepath.Join(repo, "fish/conf.d/inside.fish"):  "../b.fish",
		filepath.Join(repo, "fish/conf.d/outside.fish"): filepath.Join(home, "outside.fish"),
	} {
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := New(Options{Cwd: repo, Repo: repo, Home: home, Environ: []string{}}); err != nil {
		t.Fatalf("links inside the directory and out of the repository: %v", err)
	}
	if err := os.Symlink("../../shared/a.fish", filepath.Join(repo, "fish/conf.d/a.fish")); err != nil {
		t.Fatal(err)
	}
	_, err := New(Options{Cwd: repo, Repo: repo, Home: home, Environ: []string{}})
	if err == nil || !strings.Contains(err.Error(), "~/.config/fish") || !strings.Contains(err.Error(), "a symlink that leads to") {
		t.Errorf("a link out of ~/.config/fish into the repository: %v", err)
	}
	if err := os.Remove(filepath.Join(repo, "fish/conf.d/a.fish")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(repo, "shared/a.fish"), filepath.Join(repo, "fish/conf.d/a.fish")); err != nil {
		t.Fatal(err)
	}
	_, err = New(Options{Cwd: repo, Repo: repo, Home: home, Environ: []string{}})
	if err == nil || !strings.Contains(err.Error(), "a file with more than one name") {
		t.Errorf("a file of ~/.config/fish hard-linked into the repository: %v", err)
	}
}

// BenchmarkResolveStartupFullConfig is the same in a HOME whose ~/.config holds
// 40 applications' directories of 3 files each and whose ~/.local/bin holds 20
// programs: what the listings of linkedStartupPaths add at every launch (and what
// listing each directory of ~/.config would add; docs/security.md).
func BenchmarkResolveStartupFullConfig(b *testing.B) {
	home := homeDir(b)
	repo := filepath.Join(home, "repo")
	files := map[string]string{"repo/bashrc": ""}
	for i := range 40 {
		for j := range 3 {
			files[filepath.Join(".config", "app"+strconv.Itoa(i), "f"+strconv.Itoa(j))] = ""
		}
	}
	for i := range 20 {
		files[filepath.Join(".local/bin", "tool"+strconv.Itoa(i))] = ""
	}
	for name := range files {
		p := filepath.Join(home, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	if err := os.Symlink("repo/bashrc", filepath.Join(home, ".bashrc")); err != nil {
		b.Fatal(err)
	}
	p := &Policy{Home: home, Repo: repo}
	opts := Options{Environ: []string{}}
	for b.Loop() {
		if err := resolveStartup(p, opts); err != nil || len(p.Startup) != 1 {
			b.Fatalf("%v %v", p.Startup, err)
		}
	}
}

// TestStartupLinkedUnlisted: a link no list names, where programs find their
// start-up files and tools by name (HOME's dot entries and bin, ~/.config and the
// directories in it, ~/.local/bin), is made read-only like a listed one when it
// leads into the repository; a dot link to the whole repository, a non-dot link
// in HOME, a link inside the repository and a link that leads elsewhere are not;
// a link in ~/.config to the whole repository is refused.
func TestStartupLinkedUnlisted(t *testing.T) {
	home, repo := tree(t)
	writeHomeFiles(t, repo, map[string]string{"nvim/init.lua": "x", "bin/tool": "x", "app/conf": "x", "notes/n": "x", "emacs/init.el": "x", "starship.toml": "x", "deep.lua": "x"})
	writeHomeFiles(t, home, map[string]string{"elsewhere/f": "x", ".config/dir/plain": "x", ".local/bin/plain": "x"})
	for link, target := range map[string]string{
		".config/someapp":       "../repo/nvim",
		".config/starship.toml": "../repo/starship.toml",
		".config/dir/deep.lua":  "../../repo/deep.lua", // deeper than the rule looks
		".config/app":           "../repo/app",
		".local/bin/tool":       "../../repo/bin/tool",
		".emacs.d":              "repo/emacs",
		".dotfiles":             "repo",
		"notes":                 "repo/notes",
		".config/other":         "../elsewhere",
		"repo/link":             "../elsewhere/f",
	} {
		if err := os.Symlink(target, filepath.Join(home, link)); err != nil {
			t.Fatal(err)
		}
	}
	p, err := New(Options{Cwd: repo, Repo: repo, Home: home, Environ: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, f := range p.Startup {
		paths = append(paths, f.Path)
	}
	want := []string{filepath.Join(repo, "app"), filepath.Join(repo, "bin/tool"), filepath.Join(repo, "emacs"), filepath.Join(repo, "nvim"), filepath.Join(repo, "starship.toml")}
	if !slices.Equal(paths, want) {
		t.Errorf("start-up files %v, want %v", paths, want)
	}
	if n := strings.Join(p.StartupNotices(), "\n"); !strings.Contains(n, "~/.config/someapp leads into the writable") || !strings.Contains(n, "~/.local/bin/tool leads into") {
		t.Errorf("notices %q", n)
	}
	if err := os.Symlink("../repo", filepath.Join(home, ".config/whole")); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Options{Cwd: repo, Repo: repo, Home: home, Environ: []string{}}); err == nil || !strings.Contains(err.Error(), "~/.config/whole") || !strings.Contains(err.Error(), "itself") {
		t.Errorf("~/.config/whole -> the repository: %v, want a refusal", err)
	}
}

// TestStartupConfigDirLinked: with $XDG_CONFIG_HOME elsewhere (else agentbox's own
// config in the repository refuses the launch), ~/.config as a link to the whole
// repository is refused, since programs load what is in it by name, and one to a
// directory of the repository makes that directory read-only; the links in
// $XDG_CONFIG_HOME are looked at like ~/.config's.
func TestStartupConfigDirLinked(t *testing.T) {
	home, repo := tree(t)
	xdg := filepath.Join(home, "xdg")
	writeHomeFiles(t, repo, map[string]string{"nvim/init.lua": "x", "fish/config.fish": "x"})
	writeHomeFiles(t, home, map[string]string{"xdg/app/plain": "x"})
	opts := Options{Cwd: repo, Repo: repo, Home: home, XDGConfigHome: xdg, Environ: []string{"XDG_CONFIG_HOME=" + xdg}}
	if err := os.Symlink("repo", filepath.Join(home, ".config")); err != nil {
		t.Fatal(err)
	}
	if _, err := New(opts); err == nil || !strings.Contains(err.Error(), "~/.config") || !strings.Contains(err.Error(), "writable") {
		t.Errorf("~/.config -> the repository: %v, want a refusal", err)
	}
	// A directory of the repository as ~/.config is read-only inside, whole.
	writeHomeFiles(t, repo, map[string]string{"cfg/app/conf": "x"})
	if err := os.Remove(filepath.Join(home, ".config")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("repo/cfg", filepath.Join(home, ".config")); err != nil {
		t.Fatal(err)
	}
	if p, err := New(opts); err != nil || len(p.Startup) != 1 || p.Startup[0].Path != filepath.Join(repo, "cfg") || !p.Startup[0].Dir {
		t.Errorf("~/.config -> a directory of the repository: %v, %v; want it read-only", p, err)
	}
	if err := os.Remove(filepath.Join(home, ".config")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../repo/nvim", filepath.Join(xdg, "editor")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../repo/fish", filepath.Join(xdg, "shell")); err != nil {
		t.Fatal(err)
	}
	p, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, f := range p.Startup {
		paths = append(paths, f.Path)
	}
	if want := []string{filepath.Join(repo, "fish"), filepath.Join(repo, "nvim")}; !slices.Equal(paths, want) {
		t.Errorf("start-up files %v, want %v", paths, want)
	}
}

// TestStartupInKeptPath: a start-up file that a link in HOME leads to in a plain
// kept path is read-only inside like one in the repository; a link on the way
// inside the kept path, the kept path itself, an agent's directory and a file at
// its own HOME path in a kept path stay with the kept-path audit.
func TestStartupInKeptPath(t *testing.T) {
	home, repo := tree(t)
	writeHomeFiles(t, home, map[string]string{"dots/profile": "x", "outer/keep": "x", "dots/zshrc": "x", "dots/claude/settings.json": "{}", "dots/real-bashrc": "x", "dots/fishcfg/config.fish": "x",
		".config/systemd/user/x.service": "x"})
	for link, target := range map[string]string{
		".zshrc":       "dots/zshrc",
		".claude":      "dots/claude",
		"dots/bashrc":  "real-bashrc",
		".bashrc":      "dots/bashrc", // through a link inside the kept path
		".config/fish": "../dots/fishcfg",
		".dotfiles":    "dots",
		".profile":     "outer/link", // through a link in another kept path
		"outer/link":   "../dots/profile",
	} {
		if err := os.Symlink(target, filepath.Join(home, link)); err != nil {
			t.Fatal(err)
		}
	}
	p, err := New(Options{Cwd: repo, Repo: repo, Home: home, Environ: []string{}, Keep: []string{filepath.Join(home, "dots"), filepath.Join(home, ".config/systemd"), filepath.Join(home, "outer")}})
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, f := range p.Startup {
		paths = append(paths, f.Path)
		if f.Grant != filepath.Join(home, "dots") {
			t.Errorf("%s: grant %s", f.Path, f.Grant)
		}
	}
	if want := []string{filepath.Join(home, "dots/fishcfg"), filepath.Join(home, "dots/zshrc")}; !slices.Equal(paths, want) {
		t.Errorf("start-up files %v, want %v", paths, want)
	}
}
