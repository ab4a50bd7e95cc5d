package mounts

import (
	"fmt"
	"testing"
)

// TestBudgetSplitHoldsTheBudget: a tmpfs mounted with BudgetOptions(size), filled
// with data and with inodes at InodeMemory each, takes at most size bytes of the
// host's memory (from the smallest budget policy accepts, 1 MiB, on); never a
// size=0 or nr_inodes=0 (tmpfs's "no limit"); and the default's 4 GiB holds half a
// million files.
func TestBudgetSplitHoldsTheBudget(t *testing.T) {
	for _, size := range []int64{1 << 20, 1<<20 + 1, 3 << 20, 8 << 20, 64 << 20, 1 << 30, 1<<30 + 12345, 4 << 30, 64 << 30} {
		data, inodes := BudgetSplit(size)
		if data <= 0 || inodes <= 0 || data%4096 != 0 {
			t.Errorf("BudgetSplit(%d) = %d bytes, %d inodes: want both positive, whole pages", size, data, inodes)
		}
		if total := data + inodes*InodeMemory; total > size {
			t.Errorf("BudgetSplit(%d): %d bytes of data and %d inodes take %d bytes, more than the budget", size, data, inodes, total)
		}
		if data < size/2 || inodes < 256 {
			t.Errorf("BudgetSplit(%d) = %d bytes, %d inodes: want at least half in data and 256 inodes", size, data, inodes)
		}
		if got, want := BudgetOptions(size), fmt.Sprintf("mode=0755,size=%d,nr_inodes=%d", data, inodes); got != want {
			t.Errorf("BudgetOptions(%d) = %q, want %q", size, got, want)
		}
	}
	if _, inodes := BudgetSplit(4 << 30); inodes < 500_000 {
		t.Errorf("a 4 GiB budget holds %d inodes, want a node_modules' worth (500,000)", inodes)
	}
	if got := BudgetOptions(0); got != "mode=0755" {
		t.Errorf("BudgetOptions(0) = %q", got)
	}
}
