// Package codeshape holds the test that keeps the module's production code within
// the project's size limits: no non-test file over 800 lines, no function over 120.
// Long files and functions hide more than one job; the limits make a split happen
// when the code is written, not in a later clean-up. It has no production code.
package codeshape
