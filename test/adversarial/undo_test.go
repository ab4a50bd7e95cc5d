package adversarial

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/sandboxtest"
	"github.com/agentbox/agentbox/internal/testenv"
)

// TestUndoRepoPathRedirected (P13): the repository undo writes is named by its
// path in the record. When that repository lies inside another one (or inside an
// --add-dir), a session of the outer one can replace a directory above it with a
// symlink, so that the path names a directory elsewhere with the same last name.
// The inner session made its end state match that directory's files (the sandbox
// can read them), so without a check undo would delete and overwrite them there,
// --force or not. Undo must refuse, and change nothing outside the repository.
func TestUndoRepoPathRedirected(t *testing.T) {
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			inner := filepath.Join(b.Repo, "mid", "inner")
			victim := filepath.Join(b.Home, "victim", "inner")
			for _, d := range []string{inner, victim} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			sandboxtest.WriteFile(t, filepath.Join(inner, "f"), "one\n")
			sandboxtest.WriteFile(t, filepath.Join(victim, "f"), "victim's\n")
			sandboxtest.WriteFile(t, filepath.Join(victim, "new.txt"), "keep me\n")
			testenv.Chown(t, b.Home)
			testenv.Git(t, b.Home, inner, "init", "-q")

			// The inner session's end state: the victim's files, byte for byte.
			r := sandboxtest.Run(b.Command(inner, []string{"--repo", inner}, `cp "$HOME/victim/inner/f" f && cp "$HOME/victim/inner/new.txt" new.txt`))
			if r.Code != 0 {
				t.Fatalf("inner session: %s", r)
			}
			log := sandboxtest.Run(b.Agentbox(inner, "log", "--repo", inner))
			lines := strings.Split(strings.TrimSpace(log.Stdout), "\n")
			if log.Code != 0 || len(lines) < 2 {
				t.Fatalf("agentbox log: %s", log)
			}
			id := strings.Fields(lines[1])[0]

			// The outer session puts a symlink where the inner repository's parent was.
			b.OK(`mv mid mid.real && ln -s "$HOME/victim" mid`)

			r = sandboxtest.Run(b.Agentbox(b.Home, "undo", id))
			if got := sandboxtest.ReadFileOr(filepath.Join(victim, "f")); got != "victim's\n" {
				t.Errorf("undo wrote through the planted symlink: victim/inner/f is %q\n%s", got, r)
			}
			if !sandboxtest.Exists(filepath.Join(victim, "new.txt")) {
				t.Errorf("undo removed victim/inner/new.txt through the planted symlink\n%s", r)
			}
			if r.Code != 125 || !strings.Contains(r.Stderr, "symlink") || strings.Count(strings.TrimSpace(r.Stderr), "\n") != 0 {
				t.Errorf("undo of a repository whose path now holds a symlink: want exit 125 and one line naming the symlink, got %s", r)
			}
		})
	}
}

// TestUndoGitPlantedTempNames: undo --git writes each file of the Git dir as a new
// file beside it, renamed over it. A session that plants something at that new file's
// name (a directory, so no open can take it) must not keep undo --git from putting
// HEAD and its branch back.
func TestUndoGitPlantedTempNames(t *testing.T) {
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			testenv.Git(t, b.Home, b.Repo, "add", "README")
			testenv.Git(t, b.Home, b.Repo, "commit", "-qm", "first")
			branch := testenv.Git(t, b.Home, b.Repo, "symbolic-ref", "--short", "HEAD")
			tip := testenv.Git(t, b.Home, b.Repo, "rev-parse", "HEAD")
			b.OK(`set -e
b=$(git symbolic-ref --short HEAD)
git commit -q --allow-empty -m inside
git switch -q -c other
for n in .HEAD ".HEAD.agentbox-undo" "refs/heads/.$b.agentbox-undo" ".index.agentbox-undo" ".packed-refs.agentbox-undo"; do mkdir -p ".git/$n/x"; done`)
			r := sandboxtest.Run(b.Agentbox(b.Repo, "undo", "--git"))
			if r.Code != 0 {
				t.Errorf("undo --git with its temporary names planted: want exit 0, got %s", r)
			}
			if got := testenv.Git(t, b.Home, b.Repo, "symbolic-ref", "--short", "HEAD"); got != branch {
				t.Errorf("after undo --git HEAD is %q, want %q", got, branch)
			}
			if got := testenv.Git(t, b.Home, b.Repo, "rev-parse", branch); got != tip {
				t.Errorf("after undo --git %s is %s, want %s", branch, got, tip)
			}
		})
	}
}

// TestUndoCheckCostsWhatChanged (P13): a later session replaces each file an earlier
// one wrote with a sparse file just under the recorder's bound, which costs it
// nothing. Undo of the earlier session checks every such path against its end
// state; hashing 25 GiB of holes to find them changed held the repository for
// minutes. A file whose size is not the recorded one has changed, unread.
func TestUndoCheckCostsWhatChanged(t *testing.T) {
	const files = 100
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			b.OK(fmt.Sprintf(`mkdir sp && i=0; while [ $i -lt %d ]; do echo x > sp/f$i; i=$((i+1)); done`, files))
			log := sandboxtest.Run(b.Agentbox(b.Repo, "log"))
			lines := strings.Split(strings.TrimSpace(log.Stdout), "\n")
			if log.Code != 0 || len(lines) < 2 {
				t.Fatalf("agentbox log: %s", log)
			}
			id := strings.Fields(lines[1])[0]
			b.OK(`for f in sp/*; do rm "$f" && truncate -s 255M "$f"; done`)
			cmd := b.Agentbox(b.Repo, "undo", "--dry-run", id)
			start := time.Now()
			res := make(chan sandboxtest.Result, 1)
			if err := sandboxtest.StartAndCollect(cmd, res); err != nil {
				t.Fatal(err)
			}
			var r sandboxtest.Result
			select {
			case r = <-res:
			case <-time.After(20 * time.Second):
				_ = cmd.Process.Kill()
				<-res
				t.Fatalf("undo --dry-run over %d sparse files still ran after %v", files, time.Since(start))
			}
			if r.Code != 1 || strings.Count(r.Stdout, ": its content changed") != files {
				t.Fatalf("undo --dry-run over files replaced since: want exit 1 and each file changed, got %s", r)
			}
		})
	}
}

// TestUndoNeverRestoresAQuarantinedProgram (P7, P13): the operator's pre-commit hook
// runs scripts/check.sh from the working tree. One session rewrites it; a second
// session of the repository, started meanwhile, records the tree at its start with
// that plant in it. The audit moves the plant out; the second session's record then
// says it removed the file, and undo of it would put the plant back, with no audit
// after it, for the next git commit on the host to run. Undo must leave the
// operator's Git with no new program: the plant is moved aside again, and said.
func TestUndoNeverRestoresAQuarantinedProgram(t *testing.T) {
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			check := filepath.Join(b.Repo, "scripts", "check.sh")
			if err := os.MkdirAll(filepath.Dir(check), 0o755); err != nil {
				t.Fatal(err)
			}
			sandboxtest.WriteFile(t, check, "#!/bin/sh\necho good\n")
			hook := filepath.Join(b.Repo, ".git", "hooks", "pre-commit")
			sandboxtest.WriteFile(t, hook, "#!/bin/sh\nexec scripts/check.sh\n")
			for _, f := range []string{check, hook} {
				if err := os.Chmod(f, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			testenv.Chown(t, b.Home)
			testenv.Git(t, b.Home, b.Repo, "add", "-A")
			testenv.Git(t, b.Home, b.Repo, "commit", "-qm", "base")

			first := make(chan sandboxtest.Result, 1)
			cmd := b.Command(b.Repo, nil, `printf '#!/bin/sh\necho PLANTED\n' > scripts/check.sh && touch planted
i=0; while [ ! -e stop ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done`)
			if err := sandboxtest.StartAndCollect(cmd, first); err != nil {
				t.Fatal(err)
			}
			if !sandboxtest.WaitFor(func() bool { return sandboxtest.Exists(filepath.Join(b.Repo, "planted")) }) {
				t.Fatal("the first session did not plant")
			}
			b.OK(`echo x > second.txt`)
			sandboxtest.WriteFile(t, filepath.Join(b.Repo, "stop"), "")
			if r := <-first; r.Code != 0 {
				t.Fatalf("first session: %s", r)
			}
			if got := sandboxtest.ReadFileOr(check); strings.Contains(got, "PLANTED") {
				t.Fatalf("the audit left the plant: %q", got)
			}
			log := sandboxtest.Run(b.Agentbox(b.Repo, "log"))
			second := ""
			for _, l := range strings.Split(log.Stdout, "\n") {
				if strings.Contains(l, "second.txt") {
					second = strings.Fields(l)[0]
				}
			}
			if second == "" {
				t.Fatalf("no record of the second session: %s", log)
			}
			r := sandboxtest.Run(b.Agentbox(b.Repo, "undo", second))
			if got := sandboxtest.ReadFileOr(check); strings.Contains(got, "PLANTED") {
				t.Fatalf("undo put the planted program back for the host's git commit to run:\n%s", r)
			}
			if r.Code != 1 || !strings.Contains(r.Stderr, "scripts/check.sh") {
				t.Errorf("undo that moved a program aside: want exit 1 and the path named, got %s", r)
			}
		})
	}
}
