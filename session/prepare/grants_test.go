package prepare

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/grantledger"
	"github.com/agentbox/agentbox/policy"
)

// A Go API program's Options.Home moves the policy's state directory, while
// hostpath.LookPath, InitBinary and the CLI run later read the ledger their
// environment names: the grants must be listed there too, or a planted program in
// an added directory on PATH runs on the host later.
func TestRecordGrantsWhereReadersLook(t *testing.T) {
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	apiHome, envHome, tools := filepath.Join(base, "api-home"), filepath.Join(base, "env-home"), filepath.Join(base, "tools")
	t.Setenv("HOME", envHome)
	t.Setenv("XDG_STATE_HOME", "")
	p := &policy.Policy{ReadOnly: true, AddDirs: []string{tools}, StateDir: grantledger.StateDir("", apiHome)}
	if err := RecordGrants(p, nil); err != nil {
		t.Fatal(err)
	}
	for _, state := range []string{p.StateDir, grantledger.StateDirFromEnv()} {
		got, err := grantledger.Read(state)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(grantledger.Dirs(got), tools) {
			t.Errorf("the ledger in %s lists %v, not the added directory %s", state, got, tools)
		}
	}

	// A session that could write the readers' ledger could take its lines out.
	p = &policy.Policy{ReadOnly: true, AddDirs: []string{envHome}, StateDir: grantledger.StateDir("", apiHome)}
	err = RecordGrants(p, nil)
	if err == nil || !strings.Contains(err.Error(), "which the session may write") {
		t.Fatalf("a grant holding the readers' state directory: %v, want a refusal", err)
	}
}
