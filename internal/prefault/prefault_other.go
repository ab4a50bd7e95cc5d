//go:build !linux

package prefault

// Slice does nothing where pages cannot be mapped in ahead.
func Slice[E any](s []E) {}

// After does nothing where pages cannot be mapped in ahead.
func After[E any](s []E, max int) {}
