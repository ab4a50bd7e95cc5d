package behaviour

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestAddDir: --add-dir (issue 16) on every backend — a further directory is
// writable and its writes reach the host; when it is a Git work tree its hooks and
// config are read-only inside and a planted redirection is quarantined by the audit,
// as in the repository (P7); the repository's refusals apply (P6), and overlaps with
// the repository are refused.
func TestAddDir(t *testing.T) {
	for _, backend := range backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			extra := testenv.Dir(t, "extra")
			testenv.Git(t, b.Home, extra, "init", "-q")
			other := testenv.Dir(t, "other")
			cmd := b.Command(b.Repo, []string{"--add-dir", extra}, `echo new > "$X/file" && echo wrote
echo '[core] fsmonitor = touch /tmp/pwned' >> "$X/.git/config" 2>/dev/null && echo config-writable
touch "$X/.git/hooks/pre-commit" 2>/dev/null && echo hooks-writable
echo /tmp/evil > "$X/.git/commondir"
touch "$O/file" 2>/dev/null && echo other-writable; true`)
			cmd.Env = append(cmd.Env, "X="+extra, "O="+other)
			r := sandboxtest.Run(cmd)
			if r.Code != 0 || !strings.Contains(r.Stdout, "wrote") || strings.Contains(r.Stdout, "writable") {
				t.Errorf("inside:\n%s", r)
			}
			if sandboxtest.ReadFileOr(extra+"/file") != "new\n" {
				t.Errorf("the added directory's write did not reach the host")
			}
			commondir := filepath.Join(extra, ".git", "commondir")
			if sandboxtest.Exists(commondir) || !strings.Contains(r.Stderr, "agentbox: audit: "+commondir) {
				t.Errorf("planted commondir in the added work tree not quarantined:\n%s", r)
			}
			for _, d := range []string{b.Home + "/.local/state/agentbox/snapshots", b.Home + "/kept"} {
				if err := os.MkdirAll(d, 0o700); err != nil {
					t.Fatal(err)
				}
			}
			testenv.Chown(t, b.Home)
			for _, c := range []struct {
				args []string
				why  string
			}{
				{[]string{"--add-dir", b.Home}, "is " + b.Home},
				{[]string{"--add-dir", "/"}, "root directory"},
				{[]string{"--add-dir", b.Repo + "/sub"}, "does not exist"},
				{[]string{"--add-dir", "/proc/self"}, "lies inside /proc"},
				{[]string{"--add-dir", b.Repo}, "overlaps"},
				{[]string{"--add-dir", extra + "/.git"}, "is a Git directory"},
				{[]string{"--add-dir", b.Home + "/.local/state"}, "holds agentbox's own state"},
				{[]string{"--add-dir", b.Home + "/.local/state/agentbox/snapshots"}, "lies in agentbox's own state"},
				// The snapshot store in a writable grant: the session could rewrite
				// what undo --git and restore put back.
				{[]string{"--add-dir", extra, "--git-save-dir", extra + "/snapshots"}, "which the sandbox can write"},
				{[]string{"--keep", b.Home + "/kept", "--git-save-dir", b.Home + "/kept/snapshots"}, "which the sandbox can write"},
				{[]string{"--add-dir", extra, "--read-only"}, "goes against --read-only"},
			} {
				args := append([]string{"--no-record"}, c.args...)
				if !slices.Contains(c.args, "--git-save-dir") {
					args = append(args, "--no-git-save")
				}
				r := sandboxtest.Run(b.Command(b.Repo, args, "echo RAN"))
				if lines := strings.Split(strings.TrimSpace(r.Stderr), "\n"); r.Code != 125 || len(lines) != 1 || !strings.Contains(r.Stderr, c.why) {
					t.Errorf("%v: want 125 and one line with %q, got %s", c.args, c.why, r)
				}
			}
		})
	}
}
