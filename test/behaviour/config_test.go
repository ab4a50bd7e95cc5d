package behaviour

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// writeUserConfig writes the test user's ~/.config/agentbox/config.toml.
func writeUserConfig(t *testing.T, b *box, text string) string {
	t.Helper()
	dir := filepath.Join(b.home, ".config", "agentbox")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "config.toml")
	sandboxtest.WriteFile(t, path, text)
	testenv.Chown(t, filepath.Join(b.home, ".config"))
	return path
}

// netShared runs one session with args and says whether it kept the host's network
// namespace.
func netShared(t *testing.T, b *box, args ...string) bool {
	t.Helper()
	return nsInside(t, b, args...)["net"] == hostNamespaces(t)["net"]
}

// TestConfigFile: the user's config file sets exec's defaults, a profile lays over
// them, the command line wins, and --dry-run says where each setting came from; on
// both backends.
func TestConfigFile(t *testing.T) {
	for _, backend := range backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := newBox(t, backend)
			path := writeUserConfig(t, b, `# agentbox defaults
offline = true
git-save-keep = 3

[profile.online]
offline = false
`)
			if netShared(t, b) {
				t.Errorf("offline = true in the config file: the session kept the host network")
			}
			if !netShared(t, b, "--offline=false") {
				t.Errorf("--offline=false on the command line did not win over the file")
			}
			if !netShared(t, b, "--profile", "online") {
				t.Errorf("--profile online did not lay its offline = false over the defaults")
			}
			r := b.sh("true", "--dry-run")
			if r.code != 0 || !strings.Contains(r.stderr, "setting  offline = true  # "+path+":2") ||
				!strings.Contains(r.stderr, "setting  git-save-keep = 3  # "+path+":3") ||
				!strings.Contains(r.stderr, "setting  dry-run = true  # command line") ||
				strings.Contains(r.stdout, "setting ") {
				t.Errorf("--dry-run does not show where the settings came from:\n%s", r)
			}
			r = b.sh("true", "--profile", "nope")
			if r.code != 125 || !strings.Contains(r.stderr, "no [profile.nope]") {
				t.Errorf("unknown profile: %s", r)
			}
		})
	}
}

// TestConfigFileErrors: a bad user config file stops the launch with 125 and one
// line naming the file, the line and the key; nothing runs.
func TestConfigFileErrors(t *testing.T) {
	b := newBox(t, "native")
	for _, tc := range []struct{ text, want string }{
		{"offline = yes\n", ":1"},
		{"\n# x\nofline = true\n", ":3: ofline: unknown key"},
		{"git-save-keep = \"lots\"\n", ":1: git-save-keep: invalid value"},
		{"[profile.a]\nbackend = true\n", ":2: backend: want a value"},
	} {
		path := writeUserConfig(t, b, tc.text)
		r := b.sh("touch ran")
		if r.code != 125 || !strings.Contains(r.stderr, "config "+path+tc.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") > 0 {
			t.Errorf("%q: want 125 and one line with %q, got %s", tc.text, path+tc.want, r)
		}
		if sandboxtest.Exists(filepath.Join(b.repo, "ran")) {
			t.Fatalf("%q: the command ran despite the bad config", tc.text)
		}
	}
}

// TestRepoConfigOnlyNarrows: a repository's .agentbox.toml, which the sandbox can
// write, narrows the policy (offline) and is refused when it would widen it or is
// not a regular file; on both backends.
func TestRepoConfigOnlyNarrows(t *testing.T) {
	for _, backend := range backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := newBox(t, backend)
			repoFile := filepath.Join(b.repo, ".agentbox.toml")
			// Written from inside a first session, as an agent would.
			b.ok(`printf 'offline = true\n' > .agentbox.toml`, "--no-git-save", "--no-record")
			if netShared(t, b) {
				t.Errorf("offline = true in the repository's file: the session kept the host network")
			}
			for _, widen := range []string{"offline = false\n", "no-git-save = true\n", "allow-git-push = true\n", "nested-sandbox = true\n", "backend = \"bwrap\"\n", "[profile.x]\noffline = true\n"} {
				sandboxtest.WriteFile(t, repoFile, widen)
				testenv.Chown(t, repoFile)
				r := b.sh("touch widened")
				if r.code != 125 || !strings.Contains(r.stderr, repoFile) {
					t.Errorf("%q in the repository's file: want 125 naming it, got %s", widen, r)
				}
				if sandboxtest.Exists(filepath.Join(b.repo, "widened")) {
					t.Fatalf("%q: the command ran", widen)
				}
			}
			os.Remove(repoFile)
			if err := syscall.Mkfifo(repoFile, 0o644); err != nil {
				t.Fatal(err)
			}
			testenv.Chown(t, repoFile)
			if r := b.sh("true"); r.code != 125 || !strings.Contains(r.stderr, "not a regular file") {
				t.Errorf("a FIFO .agentbox.toml: %s", r)
			}
			os.Remove(repoFile)
			if err := os.Symlink("/etc/passwd", repoFile); err != nil {
				t.Fatal(err)
			}
			if r := b.sh("true"); r.code != 125 || !strings.Contains(r.stderr, "symlink") {
				t.Errorf("a symlink .agentbox.toml: %s", r)
			}
		})
	}
}

// readmeConfig is the README's example config file.
const readmeConfig = `hide-secrets = true
default-profile = "claude"

[profile.claude]
keep-agent = ["claude"]
allow-net = ["@claude", "@npm", "@github"]

[profile.review]
read-only = true
offline = true
`

// TestOfflineOverConfigAllowNet (issue 35.2): --offline with the README's config,
// whose profile allows hosts, and a repository's offline = true under it, run
// offline with one line saying which setting won and where each came from; on every
// backend. Both typed on the command line stay refused (TestAllowNetOffline).
func TestOfflineOverConfigAllowNet(t *testing.T) {
	for _, backend := range cliRunners(t) {
		t.Run(backend, func(t *testing.T) {
			b := newBox(t, backend)
			path := writeUserConfig(t, b, readmeConfig)
			offline := func(r result) bool {
				return r.code == 0 && strings.Contains(r.stdout, "net ") && !strings.Contains(r.stdout, "net "+hostNamespaces(t)["net"]) &&
					strings.Contains(r.stdout, "proxy-env=[]")
			}
			probe := `echo "net $(readlink /proc/self/ns/net)"; echo "proxy-env=[${HTTPS_PROXY:-}]"`
			r := b.sh(probe, "--offline", "--no-git-save", "--no-record")
			want := "agentbox: offline (command line) wins over allow-net @claude,@npm,@github (" + path + ":6 (profile claude)): the session has no network at all"
			if !offline(r) || !strings.Contains(r.stderr, want) {
				t.Errorf("--offline with the README's config: want offline and %q, got %s", want, r)
			}
			repoFile := filepath.Join(b.repo, ".agentbox.toml")
			b.ok(`printf '# review here\noffline = true\n' > .agentbox.toml`, "--no-git-save", "--no-record")
			r = b.sh(probe, "--no-git-save", "--no-record")
			want = "agentbox: offline (" + repoFile + ":2, narrowing) wins over allow-net @claude,@npm,@github (" + path + ":6 (profile claude))"
			if !offline(r) || !strings.Contains(r.stderr, want) {
				t.Errorf("a repository's offline = true under the README's config: want offline and %q, got %s", want, r)
			}
		})
	}
}

// TestRepoConfigNarrowingSaid (issue 35.6): a repository's file that narrows the
// policy says so on stderr at launch, naming itself and what it narrowed; the kept
// agent it dropped is then not kept (its writes stay in the overlay); on every
// backend.
func TestRepoConfigNarrowingSaid(t *testing.T) {
	for _, backend := range cliRunners(t) {
		t.Run(backend, func(t *testing.T) {
			b := newBox(t, backend)
			writeUserConfig(t, b, "keep-agent = [\"claude\", \"codex\"]\n")
			repoFile := filepath.Join(b.repo, ".agentbox.toml")
			b.ok(`printf 'keep-agent = ["codex"]\n' > .agentbox.toml`, "--no-git-save", "--no-record")
			// JSON data, which the kept directories' audit leaves in place (agentcfg).
			r := b.sh(`echo '{"x":1}' > ~/.claude/left-by-session.json; echo '{"y":1}' > ~/.codex/left-by-session.json`, "--no-git-save", "--no-record")
			want := "agentbox: " + repoFile + " narrows this session: keep-agent claude,codex → codex\n"
			if r.code != 0 || !strings.Contains(r.stderr, want) {
				t.Errorf("want the session to run and say %q, got %s", want, r)
			}
			if exists(filepath.Join(b.home, ".claude/left-by-session.json")) || !exists(filepath.Join(b.home, ".codex/left-by-session.json")) {
				t.Errorf("keep-agent narrowed to codex: ~/.claude must be the overlay's, ~/.codex kept")
			}
			// A file that changes nothing says nothing.
			sandboxtest.WriteFile(t, repoFile, "keep-agent = [\"claude\", \"codex\"]\n")
			testenv.Chown(t, repoFile)
			if r := b.sh("true", "--no-git-save", "--no-record"); r.code != 0 || strings.Contains(r.stderr, "narrows") {
				t.Errorf("a repository file that narrows nothing: %s", r)
			}
		})
	}
}

// TestReadOnlyOverAddDir: a repository's read-only = true under a typed --add-dir
// makes a read-only session, not a refused one: the narrower wins, said in one
// line, and the further directory is not written; on every backend.
func TestReadOnlyOverAddDir(t *testing.T) {
	for _, backend := range cliRunners(t) {
		t.Run(backend, func(t *testing.T) {
			b := newBox(t, backend)
			extra := testenv.Dir(t, "extra")
			repoFile := filepath.Join(b.repo, ".agentbox.toml")
			sandboxtest.WriteFile(t, repoFile, "read-only = true\n")
			testenv.Chown(t, repoFile)
			r := b.sh(`touch '`+extra+`/added' 2>/dev/null; touch written 2>/dev/null; true`, "--add-dir", extra)
			want := "agentbox: read-only (" + repoFile + ":1, narrowing) wins over add-dir " + extra + " (command line)"
			if r.code != 0 || !strings.Contains(r.stderr, want) {
				t.Errorf("want the session to run read-only and say %q, got %s", want, r)
			}
			if exists(filepath.Join(extra, "added")) || exists(filepath.Join(b.repo, "written")) {
				t.Errorf("read-only from the repository's file: the session wrote the repository or the further directory")
			}
		})
	}
}
