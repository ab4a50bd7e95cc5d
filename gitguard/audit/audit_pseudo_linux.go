package audit

import (
	"bytes"
	"os"
	"strings"

	"github.com/moby/sys/mountinfo"
)

// pseudoType says whether fsType is one of the kernel's filesystems that hold no
// files of a project: a mount of one inside the audited tree (a bind of /proc, a cgroup tree) is not
// walked, since what it lists is the host's processes and kernel state, unbounded
// and never Git's. A switch, not a map, so that no start of agentbox builds it.
func pseudoType(fsType string) bool {
	switch fsType {
	case "proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2",
		"debugfs", "tracefs", "securityfs", "bpf", "configfs",
		"fusectl", "pstore", "efivarfs", "binfmt_misc", "mqueue",
		"hugetlbfs", "autofs", "rpc_pipefs", "nsfs", "selinuxfs":
		return true
	}
	return false
}

// findPseudoMounts is pseudoMounts; a variable for the tests.
var findPseudoMounts = pseudoMounts

// pseudoMounts are the mount points strictly below root whose filesystem
// pseudoType takes, with their type. The table is parsed only when some mount point lies
// below root (most trees hold none). An unreadable table gives none: the walk then
// goes on as before, bounded by ScanOptions.MaxEntries.
func pseudoMounts(root string) map[string]string {
	table, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	// Mount points are the fifth field, with spaces and the like escaped as \040.
	below := strings.NewReplacer(" ", `\040`, "\t", `\011`, "\n", `\012`, `\`, `\134`).Replace(strings.TrimSuffix(root, "/")) + "/"
	if !bytes.Contains(table, []byte(" "+below)) {
		return nil
	}
	infos, err := mountinfo.GetMountsFromReader(bytes.NewReader(table), func(m *mountinfo.Info) (skip, stop bool) {
		return !pseudoType(m.FSType) || !strings.HasPrefix(m.Mountpoint, strings.TrimSuffix(root, "/")+"/"), false
	})
	if err != nil || len(infos) == 0 {
		return nil
	}
	out := map[string]string{}
	for _, m := range infos {
		out[m.Mountpoint] = m.FSType
	}
	return out
}
