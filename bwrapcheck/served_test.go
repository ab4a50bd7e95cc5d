package bwrapcheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
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

// TestCheckFUSE: a bwrap on a real FUSE mount (bindfs) made by another user, which
// reports every file as root's and writable by root only, is refused without
// running it; the same mount made by root is root's choice, and accepted.
func TestCheckFUSE(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the mounts are made for another user") // never under the test command, which runs as root
	}
	bindfs := testenv.SetupFile(t, "/usr/bin/bindfs", "bindfs (FUSE)")
	const nobody = "65534"
	for _, tt := range []struct {
		name string
		as   []string // what runs bindfs
		want string   // substring of the refusal; "" accepted
	}{
		{"mounted by another user", []string{"setpriv", "--reuid=" + nobody, "--regid=" + nobody, "--clear-groups",
			"--inh-caps=+sys_admin,+dac_override", "--ambient-caps=+sys_admin,+dac_override"}, "lies on a FUSE filesystem mounted by uid 65534, not root"},
		{"mounted by root", nil, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bin, log := fake(t, "echo 'bubblewrap 0.12.0'")
			top := t.TempDir()
			chmod(t, top, 0o755)
			src, mnt := filepath.Join(top, "src"), filepath.Join(top, "mnt")
			for _, d := range []string{src, mnt} {
				if err := os.Mkdir(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			b, err := os.ReadFile(bin)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(src, "bwrap"), b, 0o755); err != nil {
				t.Fatal(err)
			}
			if tt.as != nil { // the mirrored directory is that user's, as it would be
				for _, p := range []string{src, filepath.Join(src, "bwrap")} {
					if err := os.Chown(p, 65534, 65534); err != nil {
						t.Fatal(err)
					}
				}
			}
			argv := append(append([]string{}, tt.as...), bindfs, "-o", "allow_other", "--force-user=root", "--force-group=root", "--perms=go-w", src, mnt)
			if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
				t.Fatalf("%v: %v\n%s", argv, err, out)
			}
			t.Cleanup(func() {
				if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
					t.Errorf("umount %s: %v\n%s", mnt, err, out)
				}
			})
			if fi, err := os.Stat(filepath.Join(mnt, "bwrap")); err != nil || fi.Mode().Perm() != 0o755 {
				t.Fatalf("the mirror does not show bwrap as 0755: %v, %v", fi, err)
			}
			got, err := Check(filepath.Join(mnt, "bwrap"), 10*time.Second)
			got.Close()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("Check = %v; want one line saying %q", err, tt.want)
			}
			if runs := invocations(t, log); len(runs) != 0 {
				t.Errorf("a bwrap on another user's FUSE mount ran: %q", runs)
			}
		})
	}
}
