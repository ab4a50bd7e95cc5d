package policy

import (
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestReadConfigOpensOnlyFiles: the configs --hide-secrets reads (~/.ssh/config and
// what it includes, kubeconfigs) may be links a session left (a kept ~/.ssh, a
// KUBECONFIG in the repository). A link to a FIFO or a device is refused without
// what it leads to being opened (O_NONBLOCK kept the open from waiting, not from
// happening).
func TestReadConfigOpensOnlyFiles(t *testing.T) {
	testenv.RefusesLinkedFIFO(t, "config", func(p string) error { _, err := readConfig(p); return err })
}
