//go:build !race

package testenv

// RaceBuild: this test binary has no race detector, nor has the agentbox Binary builds.
const RaceBuild = false
