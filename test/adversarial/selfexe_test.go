package adversarial

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestBinarySwappedAfterStart: a second session's sandbox that can write where the
// agentbox binary lies (a repository, an --add-dir, a kept directory) replaces it
// while a launch starts. What now lies at the path never runs: not as the bwrap
// backend's stage (which runs outside any sandbox, with CAP_SYS_ADMIN in its user
// namespace), not as its init; the launch is refused.
func TestBinarySwappedAfterStart(t *testing.T) {
	b := sandboxtest.NewBox(t, "bwrap")
	dir := testenv.Dir(t, "bin")
	bin := filepath.Join(dir, "agentbox")
	if err := copyFile(b.Bin, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	testenv.Chown(t, bin)
	b.Bin = bin
	marker := filepath.Join(dir, "swapped-binary-ran")
	swap := filepath.Join(dir, "agentbox.new")
	sandboxtest.WriteFile(t, swap, "#!/bin/sh\necho \"$0 $*\" >> "+marker+"\nexit 0\n")
	if err := os.Chmod(swap, 0o755); err != nil {
		t.Fatal(err)
	}
	testenv.Chown(t, swap)

	res := make(chan sandboxtest.Result, 1)
	if err := sandboxtest.StartAndCollect(b.Command(b.Repo, []string{"--no-record"}, "echo genuine-ran"), res); err != nil {
		t.Fatal(err)
	}
	// Start returns once the launcher has executed; the swap lands long before the
	// launch reaches bwrap (a Git snapshot, the audit's baseline and the policy first).
	if err := os.Rename(swap, bin); err != nil {
		t.Fatal(err)
	}
	r := <-res
	if ran := sandboxtest.ReadFileOr(marker); ran != "" {
		t.Errorf("the binary swapped in at the launcher's path ran:\n%s\nlaunch: %s", ran, r)
	}
	// bwrap binds a file by path, which the binary it started as has no more: the
	// launch is refused, saying why.
	if r.Code != 125 || strings.Contains(r.Stdout, "genuine-ran") || !strings.Contains(r.Stderr, "agentbox binary was replaced or removed since this agentbox started") {
		t.Errorf("the launch was not refused with the binary's line: %s", r)
	}
}
