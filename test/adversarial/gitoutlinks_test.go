package adversarial

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// Git writes some files of .git through a plain open that follows a symlink (the
// reflogs, COMMIT_EDITMSG, FETCH_HEAD) and creates files below refs/ and objects/
// through whatever directory stands there. The sandbox may write .git; the audit
// after it must leave no symlink there that makes the operator's Git on the host
// write outside the repository. The row runs through TestEscapes on both backends.
func init() { attacks = append(attacks, gitOutLinkAttacks...) }

var gitOutLinkAttacks = []attack{
	{name: "symlinks out of the repository where the operator's Git writes", script: `
		attempt commit-editmsg ln -sf "$VICTIM" .git/COMMIT_EDITMSG
		attempt fetch-head ln -sf "$VICTIM" .git/FETCH_HEAD
		attempt merge-msg ln -sf "$VICTIM" .git/MERGE_MSG
		attempt branch-named-payload git checkout -q -b 'x$(touch${IFS}'"$PWNED"'/reflog)'
		attempt reflog sh -c 'mkdir -p .git/logs && rm -f .git/logs/HEAD && ln -s "$VICTIM" .git/logs/HEAD'
		attempt ref-dir ln -s "$OUTSIDE" .git/refs/heads/out
		h=$(printf 'operator object\n' | git hash-object --stdin); fan=${h%${h#??}}
		attempt object-dir sh -c 'mkdir -p .git/objects && rm -rf .git/objects/'"$fan"' && ln -s "$OUTSIDE" .git/objects/'"$fan"
		attempt inside-link-kept ln -s ../../README .git/logs/readme
		echo DONE`,
		check: func(t *testing.T, x *target, r sandboxtest.Result) {
			victim, outside := checksum(x.Victim), testenv.DirNames(t, x.Outside)
			operatorGitRunsNothing(t, x) // status, commit (message and reflog), fetch
			// The object's fan-out directory is the one the session linked out.
			for _, args := range [][]string{{"branch", "out/planted"}, {"checkout", "-q", "-b", "operator"}, {"hash-object", "-w", "--stdin"}} {
				cmd := testenv.Command(t, x.Home, "git", args...)
				cmd.Dir = x.Repo
				cmd.Stdin = strings.NewReader("operator object\n")
				_, _ = cmd.CombinedOutput() // a refusal is fine; a write outside is not
			}
			if now := checksum(x.Victim); now != victim {
				t.Errorf("the operator's Git wrote %s through a symlink the session left in .git:\n%s", x.Victim, sandboxtest.ReadFileOr(x.Victim))
			}
			if now := testenv.DirNames(t, x.Outside); !slices.Equal(now, outside) {
				t.Errorf("the operator's Git created files in %s through a symlinked directory of .git: %v, was %v", x.Outside, now, outside)
			}
			if _, err := os.Lstat(filepath.Join(x.Repo, ".git/logs/readme")); err != nil {
				t.Errorf("a symlink in .git that stays inside the repository was moved: %v", err)
			}
		}},
}

// TestLFSObjectDirLinkedOut: Git LFS stores an object as .git/lfs/objects/XX/YY/OID,
// made through whatever directory stands there. The session adds a file that
// .gitattributes hands to LFS and links the object's directory, three levels
// below .git/lfs, to a directory of the operator's. After the session, the
// operator's `git add` with Git LFS as `git lfs install` sets it up writes the
// object; it must land in the repository, not in the operator's directory: the
// audit moves the link aside.
func TestLFSObjectDirLinkedOut(t *testing.T) {
	if _, err := exec.LookPath("git-lfs"); err != nil {
		testenv.Skip(t, "git-lfs is not installed (scripts/setup-test-env.sh installs it)")
	}
	const payload = "large file\n"
	sum := sha256.Sum256([]byte(payload))
	oid := hex.EncodeToString(sum[:])
	link := filepath.Join(".git/lfs/objects", oid[:2], oid[2:4])
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			x := newTarget(t, backend)
			outside := testenv.DirNames(t, x.Outside)
			r := sandboxtest.Run(x.Command(x.Repo, []string{"--no-git-save", "--no-record"}, `set -e
				printf '`+strings.TrimSuffix(payload, "\n")+`\n' > big.bin
				echo '*.bin filter=lfs diff=lfs merge=lfs -text' > .gitattributes
				mkdir -p `+filepath.Dir(link)+`
				ln -s '`+x.Outside+`' `+link))
			if r.Code != 0 {
				t.Fatalf("the session failed:\n%s", r)
			}
			if !strings.Contains(r.Stderr, "where Git writes") {
				t.Errorf("the audit did not report the link out below .git/lfs:\n%s", r)
			}
			cmd := testenv.Command(t, x.Home, "git", "-c", "filter.lfs.clean=git-lfs clean -- %f",
				"-c", "filter.lfs.smudge=git-lfs smudge -- %f", "-c", "filter.lfs.process=git-lfs filter-process",
				"-c", "filter.lfs.required=true", "add", "-A")
			cmd.Dir = x.Repo
			cmd.Env = append(cmd.Env, "GIT_CONFIG_NOSYSTEM=1")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("the operator's git add with Git LFS: %v\n%s", err, out)
			}
			if now := testenv.DirNames(t, x.Outside); !slices.Equal(now, outside) {
				t.Errorf("the operator's Git LFS created files in %s through a directory the session linked below .git/lfs: %v, was %v", x.Outside, now, outside)
			}
			if b, err := os.ReadFile(filepath.Join(x.Repo, link, oid)); err != nil || string(b) != payload {
				t.Errorf("the LFS object is not in the repository's store (%v): %q", err, b)
			}
		})
	}
}
