// Package prefault maps in, ahead of use, the pages of memory that a launch is
// about to fill. On the VMs agentbox is measured on, the first touch of a fresh
// anonymous page traps into a hypervisor that shadows the guest's page tables
// (about 11 µs a page), while asking the kernel to map a range in at once costs
// about 0.55 µs a page (docs/performance.md, "What a fault and a system call cost
// here"). Mapping in changes no byte: the pages read as the zeros they would
// have read on first touch.
package prefault
