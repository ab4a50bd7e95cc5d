//go:build race

package testenv

// RaceBuild: this test binary has the race detector, and Binary builds agentbox with
// it too (CGO_ENABLED=1), so that the suites test the -race build end to end.
const RaceBuild = true
