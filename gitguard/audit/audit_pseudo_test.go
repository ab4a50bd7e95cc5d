package audit

import (
	"os"
	"path/filepath"
	"testing"
)

// TestScanSkipsPseudoMounts (issue 35): a kernel filesystem mounted in the tree is
// not walked, and the host's own /proc and /sys are found as such in the mount table.
func TestScanSkipsPseudoMounts(t *testing.T) {
	if m := pseudoMounts("/"); m["/proc"] != "proc" || m["/sys"] != "sysfs" {
		t.Fatalf("pseudoMounts(/) = %v, want /proc proc and /sys sysfs among them", m)
	}
	f := newFixture(t)
	mnt := filepath.Join(f.Repo, "procmnt")
	hook := filepath.Join(mnt, "x", ".git", "hooks", "pre-commit")
	if err := os.MkdirAll(filepath.Dir(hook), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(hook, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.scan().Items[hook]; !ok {
		t.Fatalf("the fixture's hook is not found without a mount")
	}
	old := findPseudoMounts
	defer func() { findPseudoMounts = old }()
	findPseudoMounts = func(string) map[string]string { return map[string]string{mnt: "proc"} }
	s, err := Scan(f.Repo, ScanOptions{Home: f.Home, SkipKernelMounts: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Items[hook]; ok {
		t.Errorf("the scan walked into a proc mount")
	}
	skipped := false
	for _, sk := range s.Skipped {
		skipped = skipped || sk.Path == mnt
	}
	if !skipped {
		t.Errorf("the proc mount is not among the skipped places: %v", s.Skipped)
	}
}
