//go:build mips || mipsle || mips64 || mips64le

package goinit

import "errors"

// dropSignalHandlers: MIPS lays out struct sigaction with its flags first, and has
// 128 signals; no agentbox init runs there (internal/seccomp has no filter for it either).
func dropSignalHandlers() error {
	return errors.New("no signal reset for MIPS")
}
