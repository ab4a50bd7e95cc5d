package prepare

import (
	"errors"

	"github.com/agentbox/agentbox/internal/kernel"
	"github.com/agentbox/agentbox/nsinit"
	"github.com/agentbox/agentbox/policy"
)

// ExplainRefusal replaces a native setup failure that a missing kernel feature
// explains (no user namespace, no overlay in one, a masked /proc…) with the words
// 'agentbox doctor' uses for it, measured now: the failure path alone pays for the
// probe. Any other error is returned as it is.
func ExplainRefusal(err error) error {
	var se *nsinit.SetupError
	if !errors.As(err, &se) || (se.Step != "create namespaces" && se.Step != "mount") {
		return err
	}
	// The running binary, not what lies at its path now: another session may have
	// replaced that file, and the probe runs on the host.
	if msg := kernel.Probe(kernel.Options{Command: []string{"/proc/self/exe", "doctor"}}).Refusal(); msg != "" {
		return errors.New(msg)
	}
	return err
}

// AutoBackend picks native where the kernel lets it build the sandbox — it needs
// open_tree/move_mount (Linux 5.2), which a container's seccomp filter may also hide
// — and bwrap otherwise. Both need unprivileged user namespaces; where those are off,
// native runs and explains why it cannot start ('agentbox doctor' says more).
func AutoBackend() string {
	if kernel.DetectSyscalls().NewMountAPI {
		return policy.BackendNative
	}
	return policy.BackendBwrap
}
