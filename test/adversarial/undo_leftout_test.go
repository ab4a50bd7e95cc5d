package adversarial

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestUndoKeepsWhatTheStartLeftOut (P13): the start record holds no file the
// repository's .gitignore files matched at launch. A session that stops ignoring
// one of the operator's files (a .env, a local database) makes it appear in its
// end state as a file it added, and undo would delete it: a file that was there
// before the session, never recorded, chmod'ed inside so that its ctime is the
// session's. Undo must keep it and say why; a file the session renamed still goes
// back to its old name, and one it made is still removed.
func TestUndoKeepsWhatTheStartLeftOut(t *testing.T) {
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			sandboxtest.WriteFile(t, filepath.Join(b.Repo, ".gitignore"), ".env\n")
			sandboxtest.WriteFile(t, filepath.Join(b.Repo, ".env"), "SECRET=the operator's\n")
			testenv.Chown(t, b.Repo)
			script := `printf '# nothing ignored\n' > .gitignore && chmod 600 .env && chmod 644 .env && mv README README.md && echo new > made.txt`
			if r := sandboxtest.Run(b.Command(b.Repo, nil, script)); r.Code != 0 {
				t.Fatalf("session: %s", r)
			}
			dry := sandboxtest.Run(b.Agentbox(b.Repo, "undo", "--dry-run"))
			undo := sandboxtest.Run(b.Agentbox(b.Repo, "undo"))
			if got := sandboxtest.ReadFileOr(filepath.Join(b.Repo, ".env")); got != "SECRET=the operator's\n" {
				t.Fatalf("undo deleted or changed the operator's ignored file (.env now %q):\n%s\ndry run:\n%s", got, undo, dry)
			}
			if undo.Code != 1 || !strings.Contains(undo.Stdout+undo.Stderr, ".env") {
				t.Errorf("undo did not stop at .env, naming it: %s", undo)
			}
			// The rest goes back, the rename included.
			force := sandboxtest.Run(b.Agentbox(b.Repo, "undo", "--", "README.md", "README", "made.txt", ".gitignore"))
			if force.Code != 0 {
				t.Fatalf("undo of the other paths: %s", force)
			}
			if sandboxtest.ReadFileOr(filepath.Join(b.Repo, "README")) != "hello\n" || sandboxtest.Exists(filepath.Join(b.Repo, "README.md")) ||
				sandboxtest.Exists(filepath.Join(b.Repo, "made.txt")) || sandboxtest.ReadFileOr(filepath.Join(b.Repo, ".gitignore")) != ".env\n" {
				t.Errorf("the session's rename, new file and .gitignore were not put back: %s", force)
			}
			if _, err := os.Stat(filepath.Join(b.Repo, ".env")); err != nil {
				t.Errorf(".env: %v", err)
			}
		})
	}
}
