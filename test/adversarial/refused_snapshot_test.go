package adversarial

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestRefusedLaunchTakesNoSnapshot (found by a red-team helper): a session points
// .git/commondir at a decoy while the user launches a second session, which its
// recheck refuses (exit 125). The refused launch must take no snapshot and apply
// no retention: with the host work started before the recheck, it saved the decoy
// as the common dir, and a decoy larger than the byte budget evicted every older
// snapshot of the repository.
func TestRefusedLaunchTakesNoSnapshot(t *testing.T) {
	b := sandboxtest.NewBox(t, "native")
	repo := b.Repo
	decoy := filepath.Join(b.Home, "decoy")
	mkUserDir(t, filepath.Join(decoy, "sub"))
	sandboxtest.WriteFile(t, filepath.Join(decoy, "sub", "blob"), strings.Repeat("d", 3<<20))
	testenv.Chown(t, decoy)

	records := func() []string {
		r, _ := filepath.Glob(filepath.Join(b.Home, ".local/state/agentbox/snapshots/"+filepath.Base(repo)+"-*/snaps/*.snap"))
		return r
	}
	// The planting session runs until the test is done with the second launch
	// (release), however long that launch takes on a loaded machine: its own end
	// would audit the plant away before the second launch's recheck.
	planter := b.Command(repo, nil, "echo "+decoy+` > .git/commondir && touch planted &&
		i=0; while [ ! -e release ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done`)
	if err := planter.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = os.WriteFile(filepath.Join(repo, "release"), nil, 0o644)
		_ = planter.Wait()
	}()
	planted := filepath.Join(repo, "planted")
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Lstat(planted); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the planting session did not start")
		}
	}
	before := records() // the planting session's own snapshot is taken by now
	if len(before) == 0 {
		t.Fatal("no snapshot record before the refused launch")
	}
	r := sandboxtest.Run(b.Command(repo, []string{"--git-save-keep-size", "1M"}, "true"))
	if r.Code != 125 || !strings.Contains(r.Stderr, "not launching") {
		t.Fatalf("the launch beside the planted commondir: %s; want 125, refused by the recheck", r)
	}
	after := records()
	if strings.Join(after, " ") != strings.Join(before, " ") {
		t.Errorf("the refused launch changed the snapshots: %q, was %q", after, before)
	}
	for _, p := range after {
		if b, _ := os.ReadFile(p); strings.Contains(string(b), decoy) {
			t.Errorf("%s holds the decoy", p)
		}
	}
}
