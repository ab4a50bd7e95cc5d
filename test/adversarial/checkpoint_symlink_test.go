package adversarial

import (
	"crypto/sha1"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/kernel"
	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestCheckpointNeverReadsThroughASwappedDirectory (P11, P13): while its checkpoint
// is recorded, the sandbox swaps directories of new files, in a loop, with
// symlinks to a directory of the operator's outside the repository, whose file
// names it knows. The recorder's `git add` looked at a directory, then opened a
// file below it by path: through the symlink, it stored the outside file's
// content as a blob of the step (which `agentbox undo --to` writes into the
// working tree). With the recorder's Git confined to the repository (Landlock),
// no step holds it.
func TestCheckpointNeverReadsThroughASwappedDirectory(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		testenv.Skip(t, "python3 missing")
	}
	if kernel.LandlockABI() == 0 {
		testenv.Skip(t, "no Landlock on this kernel: the recorder's Git is not confined (docs/security.md)")
	}
	const secret = "outside content!\n" // as long as the decoy: Git reads what lstat said
	secretID := fmt.Sprintf("%x", sha1.Sum([]byte(fmt.Sprintf("blob %d\x00%s", len(secret), secret))))
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			outside := filepath.Join(b.Home, "operator-only")
			if err := os.MkdirAll(outside, 0o700); err != nil {
				t.Fatal(err)
			}
			for r := range 3 {
				for i := range 200 {
					sandboxtest.WriteFile(t, filepath.Join(outside, fmt.Sprintf("k%d-%d", r, i)), secret)
				}
			}
			testenv.Chown(t, outside)
			cmd := b.Command(b.Repo, nil, `python3 - <<'EOF'
import ctypes, os, subprocess
libc = ctypes.CDLL(None, use_errno=True)
for d in range(8):
    os.makedirs("d%d" % d)
    os.symlink(os.environ["OUTSIDE"], "l%d" % d)
for r in range(3):
    for d in range(8):
        for i in range(200):
            with open("d%d/k%d-%d" % (d, r, i), "w") as f:
                f.write("inside decoy 17!\n")
    pids = []
    for d in range(8):
        pid = os.fork()
        if pid == 0:
            a, b = ("d%d" % d).encode(), ("l%d" % d).encode()
            while True:
                libc.renameat2(-100, a, -100, b, 2)  # RENAME_EXCHANGE
        pids.append(pid)
    subprocess.run([os.environ["AB"], "checkpoint", "race %d" % r])
    for pid in pids:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    for d in range(8):
        if os.path.islink("d%d" % d):
            libc.renameat2(-100, ("d%d" % d).encode(), -100, ("l%d" % d).encode(), 2)
EOF`)
			cmd.Env = append(cmd.Env, "AB="+b.Bin, "OUTSIDE="+outside)
			// A checkpoint may fail while its tree changes under it; what matters is
			// what the ones taken stored.
			if r := sandboxtest.Run(cmd); r.Code != 0 || !strings.Contains(r.Stderr, "checkpoint: step ") {
				t.Fatalf("session: %s", r)
			}
			stores, _ := filepath.Glob(filepath.Join(b.Home, ".local/state/agentbox/shadow/*.git"))
			if len(stores) != 1 {
				t.Fatalf("shadow repositories: %v", stores)
			}
			out, err := exec.Command("git", "-c", "safe.directory=*", "--git-dir", stores[0], "cat-file", "--batch-all-objects", "--batch-check=%(objectname)").Output()
			if err != nil || len(out) == 0 {
				t.Fatalf("list the shadow repository's objects: %v", err)
			}
			if strings.Contains(string(out), secretID) {
				t.Fatal("a checkpoint stored the content of a file outside the repository, read through a directory the sandbox swapped for a symlink")
			}
		})
	}
}
