//go:build !linux

package compat_test

// initMain: the init runs on Linux only.
func initMain() {}
