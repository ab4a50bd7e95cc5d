package adversarial

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestUndoForceKeepsWhatItsRecordCannotHold (P8, P13): `undo --force` overwrites
// or removes files changed since the session ended, on the promise that the undo
// first records the tree as it is, so that `agentbox undo ID` of the undo brings
// the operator's edits back. That record has the recorder's bounds and honours
// skips what is sparse or large: a file the operator made sparse (a disk image)
// or large since the session is left out of it. Undo must not overwrite or remove
// what its own record does not hold: the operator's content would be gone with no
// record of it. Those paths are kept, each named, and the undo exits 1; the rest
// is put back, and the undo of the undo restores the operator's edits (a file
// ignored since is still recorded: the record tracks it).
func TestUndoForceKeepsWhatItsRecordCannotHold(t *testing.T) {
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			host := func(script string) {
				t.Helper()
				cmd := testenv.Command(t, b.Home, "/bin/sh", "-c", script)
				cmd.Dir = b.Repo
				if r := sandboxtest.Run(cmd); r.Code != 0 {
					t.Fatalf("host script %q: %s", script, r)
				}
			}
			sandboxtest.WriteFile(t, filepath.Join(b.Repo, "image"), "start\n")
			sandboxtest.WriteFile(t, filepath.Join(b.Repo, "notes"), "start notes\n")
			sandboxtest.WriteFile(t, filepath.Join(b.Repo, "plain"), "start plain\n")
			testenv.Chown(t, b.Repo)
			script := `printf 'agent\n' > image && printf 'agent\n' > added.img && printf 'agent notes\n' > notes && printf 'agent plain\n' > plain`
			if r := sandboxtest.Run(b.Command(b.Repo, nil, script)); r.Code != 0 {
				t.Fatalf("session: %s", r)
			}
			// The operator's work after the session: two sparse images (8 MiB,
			// a few bytes of data), an edit of a file now ignored, and a plain edit.
			host(`printf 'operator image\n' > image && truncate -s 8M image && ` +
				`printf 'operator added\n' > added.img && truncate -s 8M added.img && ` +
				`printf 'notes\n' > .gitignore && printf 'operator notes\n' > notes && ` +
				`printf 'operator plain\n' > plain`)
			undo := sandboxtest.Run(b.Agentbox(b.Repo, "undo", "--force"))
			for name, want := range map[string]string{"image": "operator image\n", "added.img": "operator added\n"} {
				got := sandboxtest.ReadFileOr(filepath.Join(b.Repo, name))
				if !strings.HasPrefix(got, want) {
					t.Errorf("undo --force overwrote or removed %s, which its own record does not hold (now %.20q):\n%s", name, got, undo)
				}
				if !strings.Contains(undo.Stdout, "not put back: "+name+": ") {
					t.Errorf("undo --force did not name %s as kept:\n%s", name, undo)
				}
			}
			if undo.Code != 1 {
				t.Errorf("undo --force that kept files exited %d, want 1:\n%s", undo.Code, undo)
			}
			for name, want := range map[string]string{"plain": "start plain\n", "notes": "start notes\n"} {
				if got := sandboxtest.ReadFileOr(filepath.Join(b.Repo, name)); got != want {
					t.Fatalf("undo --force did not put %s back (now %q):\n%s", name, got, undo)
				}
			}
			// The undo is reversible: its undo gives the operator's edits back.
			again := sandboxtest.Run(b.Agentbox(b.Repo, "undo"))
			for name, want := range map[string]string{"plain": "operator plain\n", "notes": "operator notes\n"} {
				if got := sandboxtest.ReadFileOr(filepath.Join(b.Repo, name)); again.Code != 0 || got != want {
					t.Errorf("the undo of the undo did not give the operator's %s back (now %q):\n%s", name, got, again)
				}
			}
			if fi, err := os.Stat(filepath.Join(b.Repo, "image")); err != nil || fi.Size() != 8<<20 {
				t.Errorf("image after the undo of the undo: %v %v", fi, err)
			}
		})
	}
}
