package mounts

import "fmt"

// InodeMemory is the kernel memory the budget counts for each of its inodes,
// beside the data: an inode, its dentry, a name up to 255 bytes, a short
// symlink's target, and (Linux 6.6+) the user.* extended attributes tmpfs charges
// against the inodes' space (1 KiB of it an inode). Measured on 6.18 in a memory
// cgroup, a tmpfs filled up to its nr_inodes: 1.48 KiB an empty file with a
// 255-byte name, 1.49 KiB a symlink with a 127-byte target, 0.92 KiB a short name,
// 1.82 KiB each inode's share of empty-valued extended attributes (the worst
// found); docs/usage.md.
const InodeMemory = 2048

// BudgetSplit divides a budget of size bytes between the data (the tmpfs's
// size=) and the inodes (its nr_inodes=) so that data + inodes × InodeMemory ≤
// size: the kernel memory of a filled tmpfs stays within the budget. One inode
// per 8 KiB of the budget (a quarter of it in inodes, three quarters in data: a
// 4 GiB budget holds 524,288 files, a node_modules' worth), at least 256 (or
// one per 4 KiB, half the budget, for the smallest budgets) for the sandbox's
// own directories and devices. size 0: no bound, the kernel's defaults.
func BudgetSplit(size int64) (data, inodes int64) {
	if size <= 0 {
		return 0, 0
	}
	inodes = max(size/8192, min(256, size/4096))
	inodes = max(inodes, 1)
	// At least a page: size=0 would be tmpfs's "no limit".
	data = max((size-inodes*InodeMemory)&^4095, 4096)
	return data, inodes
}

// BudgetOptions is the mount data of the tmpfs that holds the plan's RAM-backed
// filesystems (Plan.TmpSize), for every backend: BudgetSplit's data and inodes.
// size 0: the kernel's default size.
func BudgetOptions(size int64) string {
	data, inodes := BudgetSplit(size)
	if size <= 0 {
		return "mode=0755"
	}
	return fmt.Sprintf("mode=0755,size=%d,nr_inodes=%d", data, inodes)
}
