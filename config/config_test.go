package config

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agentbox/agentbox/internal/cli"
	"github.com/agentbox/agentbox/policy"
)

// testFlags is a stand-in for exec's flags: one of each kind a file can set.
func testFlags() (*flag.FlagSet, *[]string, *[]string) {
	fs := flag.NewFlagSet("exec", flag.ContinueOnError)
	fs.Bool("offline", false, "")
	fs.Bool("read-only", false, "")
	fs.Bool("allow-git-push", false, "")
	fs.Bool("nested-sandbox", true, "")
	fs.Bool("no-git-save", false, "")
	fs.String("backend", "native", "")
	fs.Int("git-save-keep", 20, "")
	fs.Bool("dry-run", false, "")
	fs.Bool("serve", false, "internal: x")
	var keep, hide []string
	fs.Var(cli.NewList(&keep), "keep", "")
	fs.Var(cli.NewList(&hide), "hide", "")
	return fs, &keep, &hide
}

func TestParseAndApply(t *testing.T) {
	src := `# defaults
offline = true
backend = "bwrap"
git-save-keep = 5
keep = ["~/.claude", "~/.codex"]
default-profile = "work"

[profile.work]
hide = ["~/.ssh"]
keep = ["~/.npm"]

[profile.other]
offline = false
`
	f, err := Parse("c.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	settings, err := f.Selected("")
	if err != nil {
		t.Fatal(err)
	}
	fs, keep, hide := testFlags()
	prov := map[string]string{}
	if err := Apply(fs, settings, prov); err != nil {
		t.Fatal(err)
	}
	if err := fs.Parse([]string{"--keep", "~/x"}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(*keep, ","); got != "~/.claude,~/.codex,~/.npm,~/x" {
		t.Errorf("keep = %s", got)
	}
	if got := strings.Join(*hide, ","); got != "~/.ssh" {
		t.Errorf("hide = %s", got)
	}
	if fs.Lookup("offline").Value.String() != "true" || fs.Lookup("backend").Value.String() != "bwrap" || fs.Lookup("git-save-keep").Value.String() != "5" {
		t.Errorf("scalars not applied")
	}
	if prov["offline"] != "c.toml:2" || prov["hide"] != "c.toml:9 (profile work)" {
		t.Errorf("provenance: %v", prov)
	}
	if s, _ := f.Selected("other"); len(s) == 0 || s[len(s)-1].Key != "offline" {
		t.Errorf("--profile other: %v", s)
	}
	if _, err := f.Selected("nope"); err == nil || !strings.Contains(err.Error(), "it has: other, work") {
		t.Errorf("unknown profile: %v", err)
	}
}

func TestBadFilesNameFileLineKey(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"offline = tru\n", "config c.toml:1"},
		{"\n\nofline = true\n", "config c.toml:3: ofline: unknown key"},
		{"offline = \"yes\"\n", "config c.toml:1: offline: want true or false"},
		{"backend = true\n", "config c.toml:1: backend: want a value"},
		{"keep = [1, 2]\n", "config c.toml:1: keep: want a list of strings"},
		{"backend = [\"a\"]\n", "config c.toml:1: backend: takes one value"},
		{"git-save-keep = \"many\"\n", "config c.toml:1: git-save-keep: invalid value"},
		{"dry-run = true\n", "config c.toml:1: dry-run: not a setting"},
		{"serve = true\n", "config c.toml:1: serve: unknown key"},
		{"[profile.x]\n\noffline = 3\n", "config c.toml:3: offline: want true or false"},
		{"default-profile = \"missing\"\n", "config c.toml:1: default-profile: no [profile.missing]"},
		{"profile = \"x\"\n", "config c.toml:1: profile: profiles are tables"},
		{"[net]\nx = 1\n", "config c.toml:1: net: not a table"},
	} {
		fs, _, _ := testFlags()
		f, err := Parse("c.toml", []byte(tc.src))
		if err == nil {
			var s []Setting
			if s, err = f.Selected(""); err == nil {
				if err = Apply(fs, s, map[string]string{}); err == nil && f.Profiles["x"] != nil {
					err = Apply(fs, f.Profiles["x"], map[string]string{})
				}
			}
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q", tc.src, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: message is not one line: %q", tc.src, err)
		}
	}
}

func TestNarrowOnlyNarrows(t *testing.T) {
	fs, keep, hide := testFlags()
	*keep = []string{"~/.claude", "~/.codex"}
	*hide = []string{"~/.ssh"}
	repo, err := Parse("r.toml", []byte("offline = true\nread-only = true\nallow-git-push = false\nnested-sandbox = false\nhide = [\"~/.aws\"]\nkeep = [\"~/.codex\", \"~/.evil\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	prov := map[string]string{}
	if err := Narrow(fs, repo.Top, prov); err != nil {
		t.Fatal(err)
	}
	if strings.Join(*keep, ",") != "~/.codex" {
		t.Errorf("keep narrowed to %v, want only ~/.codex (never ~/.evil)", *keep)
	}
	if strings.Join(*hide, ",") != "~/.ssh,~/.aws" {
		t.Errorf("hide = %v", *hide)
	}
	if fs.Lookup("offline").Value.String() != "true" || fs.Lookup("read-only").Value.String() != "true" {
		t.Errorf("offline/read-only not set")
	}
	if fs.Lookup("nested-sandbox").Value.String() != "false" {
		t.Errorf("nested-sandbox = false did not turn it off")
	}
	if !strings.Contains(prov["keep"], "narrowing") {
		t.Errorf("prov: %v", prov)
	}
	for _, widen := range []string{"offline = false\n", "allow-git-push = true\n", "nested-sandbox = true\n", "no-git-save = true\n", "backend = \"bwrap\"\n", "git-save-keep = 1\n", "unknown = 1\n"} {
		fs, _, _ := testFlags()
		f, err := Parse("r.toml", []byte(widen))
		if err != nil {
			t.Fatal(err)
		}
		err = Narrow(fs, f.Top, map[string]string{})
		if err == nil || !strings.Contains(err.Error(), "r.toml:1") {
			t.Errorf("%q: a widening must be refused with file and line, got %v", widen, err)
		}
	}
}

func TestReadRepoIsSafe(t *testing.T) {
	dir := t.TempDir()
	if f, err := ReadRepo(filepath.Join(dir, RepoFile)); f != nil || err != nil {
		t.Errorf("missing file: %v, %v", f, err)
	}
	target := filepath.Join(dir, "elsewhere.toml")
	os.WriteFile(target, []byte("offline = true\n"), 0o644)
	link := filepath.Join(dir, "link.toml")
	os.Symlink(target, link)
	if _, err := ReadRepo(link); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Errorf("symlink: %v", err)
	}
	fifo := filepath.Join(dir, "fifo.toml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := ReadRepo(fifo); done <- err }()
	if err := <-done; err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("FIFO: %v", err)
	}
	big := filepath.Join(dir, "big.toml")
	os.WriteFile(big, []byte(strings.Repeat("#", MaxSize+1)), 0o644)
	if _, err := ReadRepo(big); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Errorf("big file: %v", err)
	}
	var e *Error
	if _, err := ReadRepo(link); !errors.As(err, &e) || e.File != link {
		t.Errorf("error type: %v", err)
	}
}

// TestNarrowTmpSize: a repository's file may lower tmp-size below what is in effect
// (the user's value, else the default), never raise it, and a bad size names the
// file and line.
func TestNarrowTmpSize(t *testing.T) {
	def := policy.DefaultTmpSize(policy.TotalRAM())
	for _, c := range []struct {
		user, repo, want, err string
	}{
		{user: "8M", repo: `tmp-size = "4M"`, want: "4M"},
		{user: "8M", repo: `tmp-size = "8M"`, want: "8M"},
		{user: "8M", repo: `tmp-size = 4194304`, want: "4194304"},
		{user: "", repo: `tmp-size = "2M"`, want: "2M"},
		{user: "8M", repo: `tmp-size = "16M"`, err: "r.toml:1: tmp-size: 16M is more than the 8M"},
		{user: "", repo: fmt.Sprintf("tmp-size = %d", def+1<<20), err: "may only lower it"},
		{user: "8M", repo: `tmp-size = "0"`, err: "r.toml:1: tmp-size: invalid value"},
		{user: "8M", repo: `tmp-size = "-4M"`, err: "not a positive size"},
		{user: "8M", repo: `tmp-size = true`, err: "want a size"},
		{user: "8M", repo: `tmp-size = ["1M"]`, err: "want a size"},
	} {
		fs := flag.NewFlagSet("exec", flag.ContinueOnError)
		fs.String("tmp-size", c.user, "")
		f, err := Parse("r.toml", []byte(c.repo+"\n"))
		if err != nil {
			t.Fatal(err)
		}
		err = Narrow(fs, f.Top, map[string]string{})
		got := fs.Lookup("tmp-size").Value.String()
		switch {
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("user %q, repo %q: tmp-size %q, %v; want %q", c.user, c.repo, got, err, c.want)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err) || got != c.user):
			t.Errorf("user %q, repo %q: tmp-size %q, %v; want it refused (%q) and unchanged", c.user, c.repo, got, err, c.err)
		}
	}
}

// TestNarrowLimits: a repository's file may lower memory, pids and cpus, or set one
// the user has not, never raise one; a TOML float is read as --cpus reads it.
func TestNarrowLimits(t *testing.T) {
	for _, c := range []struct {
		key, user, repo, want, err string
	}{
		{key: "memory", user: "2G", repo: `memory = "1G"`, want: "1G"},
		{key: "memory", user: "", repo: `memory = "1G"`, want: "1G"},
		{key: "memory", user: "1G", repo: `memory = "2G"`, err: "r.toml:1: memory: 2G is more than the 1G"},
		{key: "memory", user: "1G", repo: `memory = ""`, err: "no limit is more than the 1G"},
		{key: "memory", user: "1G", repo: `memory = "100"`, err: "below the minimum of 16M"},
		{key: "pids", user: "100", repo: `pids = 50`, want: "50"},
		{key: "pids", user: "", repo: `pids = 50`, want: "50"},
		{key: "pids", user: "100", repo: `pids = 200`, err: "200 is more than the 100"},
		{key: "pids", user: "100", repo: `pids = -1`, err: "not a positive whole number"},
		{key: "cpus", user: "1", repo: `cpus = 0.5`, want: "0.5"},
		{key: "cpus", user: "", repo: `cpus = 0.5`, want: "0.5"},
		{key: "cpus", user: "0.5", repo: `cpus = 1`, err: "1 CPUs is more than the 0.5 CPUs"},
		{key: "cpus", user: "0.5", repo: `cpus = 1e9`, err: "cpus: invalid value"},
		{key: "cpus", user: "0.5", repo: `cpus = true`, err: "want a size"},
	} {
		fs := flag.NewFlagSet("exec", flag.ContinueOnError)
		fs.String(c.key, c.user, "")
		f, err := Parse("r.toml", []byte(c.repo+"\n"))
		if err != nil {
			t.Fatal(err)
		}
		err = Narrow(fs, f.Top, map[string]string{})
		got := fs.Lookup(c.key).Value.String()
		switch {
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("user %q, repo %q: %s %q, %v; want %q", c.user, c.repo, c.key, got, err, c.want)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err) || got != c.user):
			t.Errorf("user %q, repo %q: %s %q, %v; want it refused (%q) and unchanged", c.user, c.repo, c.key, got, err, c.err)
		}
	}
}
