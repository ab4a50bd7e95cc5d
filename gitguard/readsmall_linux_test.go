package gitguard

import (
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestPointerFileOpensOnlyFiles: Git's pointer files (.git as a file, commondir,
// gitdir) are repository files the sandbox writes, read by the launcher through
// symlinks as Git does. A link to a FIFO or a device is refused without what it
// leads to being opened.
func TestPointerFileOpensOnlyFiles(t *testing.T) {
	testenv.RefusesLinkedFIFO(t, "commondir", func(p string) error { _, err := readSmall(p); return err })
}
