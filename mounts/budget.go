package mounts

import "fmt"

// BudgetOptions is the mount data of the tmpfs that holds the plan's RAM-backed
// filesystems (Plan.TmpSize), for every backend. Its inodes are bounded too, one per
// page of the size (at least 1024): an empty file costs no page, but kernel memory.
// size 0: the kernel's default size.
func BudgetOptions(size int64) string {
	if size <= 0 {
		return "mode=0755"
	}
	return fmt.Sprintf("mode=0755,size=%d,nr_inodes=%d", size, max(size/4096, 1024))
}
