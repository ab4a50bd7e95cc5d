package prepare

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/gitguard"
	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/mounts/build"
	"github.com/agentbox/agentbox/policy"
)

// The recheck hands the identities it verified to the backend: the repository's bind
// and every protected path's carry them (mounts.Op.SourceID), nothing else does.
func TestVerifyUnchangedSetsSourceIDs(t *testing.T) {
	repo, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{".git/hooks"} {
		if err := os.MkdirAll(filepath.Join(repo, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(repo, ".git/config"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	prot, err := gitguard.ProtectedPaths(repo)
	if err != nil {
		t.Fatal(err)
	}
	id, err := repoIdentity(repo)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]mounts.FileID{}
	if err := verifyUnchanged(repo, id, prot, ids); err != nil {
		t.Fatal(err)
	}
	plan := build.Plan(&policy.Policy{Repo: repo, Workdir: repo, Command: []string{"true"}}, mounts.Session{Protected: prot, SourceIDs: ids})
	checked := 0
	for _, op := range plan.Ops {
		var st unix.Stat_t
		switch {
		case op.Kind == mounts.Bind || op.Kind == mounts.BindRO && op.Source != "/":
			if err := unix.Stat(op.Source, &st); err != nil {
				t.Fatal(err)
			}
			if op.SourceID != (mounts.FileID{Dev: st.Dev, Ino: st.Ino}) {
				t.Errorf("%s: SourceID %+v, want its device and inode", op.Source, op.SourceID)
			}
			checked++
		case op.SourceID != (mounts.FileID{}):
			t.Errorf("%s %s: SourceID %+v set", op.Kind, op.Dest, op.SourceID)
		}
	}
	if checked < 3 {
		t.Errorf("only %d binds checked: %+v", checked, plan.Ops)
	}
}
