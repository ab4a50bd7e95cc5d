//go:build !linux

package compat

// IsStage reports whether this process is the bwrap backend's stage; never off Linux.
func IsStage() bool { return false }

// StageMain is the stage (stage_linux.go); there is none off Linux.
func StageMain() {}
