package audit

import (
	"bytes"
	"os"
	"strings"

	"github.com/moby/sys/mountinfo"
)

// pseudoTypes are the kernel's filesystems that hold no files of a project: a
// mount of one inside the audited tree (a bind of /proc, a cgroup tree) is not
// walked, since what it lists is the host's processes and kernel state, unbounded
// and never Git's.
var pseudoTypes = map[string]bool{
	"proc": true, "sysfs": true, "devtmpfs": true, "devpts": true, "cgroup": true, "cgroup2": true,
	"debugfs": true, "tracefs": true, "securityfs": true, "bpf": true, "configfs": true,
	"fusectl": true, "pstore": true, "efivarfs": true, "binfmt_misc": true, "mqueue": true,
	"hugetlbfs": true, "autofs": true, "rpc_pipefs": true, "nsfs": true, "selinuxfs": true,
}

// findPseudoMounts is pseudoMounts; a variable for the tests.
var findPseudoMounts = pseudoMounts

// pseudoMounts are the mount points strictly below root whose filesystem is one of
// pseudoTypes, with their type. The table is parsed only when some mount point lies
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
		return !pseudoTypes[m.FSType] || !strings.HasPrefix(m.Mountpoint, strings.TrimSuffix(root, "/")+"/"), false
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
