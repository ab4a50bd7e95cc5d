package trustedexec

import (
	"strings"
	"testing"
)

// TestServedBy: the decision on each filesystem type, by its statfs magic
// number: the kernel's filesystems are taken at their word, FUSE only when
// root mounted it.
func TestServedBy(t *testing.T) {
	for _, tt := range []struct {
		name  string
		magic int64
		m     mount
		ok    bool
		want  string // "" trusted, else a substring of who mounted it
	}{
		{"ext4", 0xEF53, mount{"ext4", "rw"}, true, ""},
		{"tmpfs", 0x01021994, mount{"tmpfs", "rw,size=10m"}, true, ""},
		{"NFS, mounted by root", 0x6969, mount{"nfs4", "rw,vers=4.2"}, true, ""},
		{"9p, mounted by root", 0x01021997, mount{"9p", "rw,trans=virtio"}, true, ""},
		{"FUSE mounted by root", fuseSuperMagic, mount{"fuse.sshfs", "rw,user_id=0,group_id=0,allow_other"}, true, ""},
		{"FUSE mounted by a user", fuseSuperMagic, mount{"fuse", "rw,user_id=1000,group_id=1000"}, true, "uid 1000"},
		{"FUSE user_id=00", fuseSuperMagic, mount{"fuse", "rw,user_id=00"}, true, "uid 00"},
		{"FUSE naming no user", fuseSuperMagic, mount{"fuse", "rw,allow_other"}, true, "no user_id"},
		{"FUSE whose mount was not found", fuseSuperMagic, mount{}, false, "cannot identify"},
		// virtiofs (only root mounts it) shows no user_id at all.
		{"virtiofs", fuseSuperMagic, mount{"virtiofs", "rw"}, true, ""},
		{"a user's FUSE of subtype virtiofs", fuseSuperMagic, mount{"fuse.virtiofs", "rw,user_id=1000,group_id=1000"}, true, "uid 1000"},
		{"a user's FUSE of subtype virtiofs naming no user", fuseSuperMagic, mount{"fuse.virtiofs", "rw"}, true, "no user_id"},
	} {
		got := servedBy(tt.magic, tt.m, tt.ok)
		if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
			t.Errorf("%s: servedBy = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// TestSuperOptions reads a mount's type and super options from a mountinfo
// listing, with optional fields or none, and finds none for a mount not listed or
// a line cut short.
func TestSuperOptions(t *testing.T) {
	const mountinfo = `22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw,errors=remount-ro
102 26 0:46 / /home/u/m\040x rw,nosuid,nodev,relatime shared:5 master:2 - fuse bindfs rw,user_id=1000,group_id=1000
103 26 0:47 / /mnt/y rw,relatime - fuse.sshfs u@h:
104 26 0:48 / /nix rw,relatime - virtiofs nix rw
`
	for _, tt := range []struct {
		id   int
		want mount
		ok   bool
	}{{22, mount{"ext4", "rw,errors=remount-ro"}, true}, {102, mount{"fuse", "rw,user_id=1000,group_id=1000"}, true},
		{103, mount{}, false}, {104, mount{"virtiofs", "rw"}, true}, {7, mount{}, false}} {
		got, ok := mountOf(strings.NewReader(mountinfo), tt.id)
		if got != tt.want || ok != tt.ok {
			t.Errorf("mount %d: %+v, %v; want %+v, %v", tt.id, got, ok, tt.want, tt.ok)
		}
	}
}
