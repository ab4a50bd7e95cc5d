package kernel

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// A mount below HOME is what makes the kernel refuse the HOME overlay in a user
// namespace; the explanation names it, so the scan must find exactly the mounts
// strictly below the directory, with mountinfo's escapes undone.
func TestMountsBelow(t *testing.T) {
	proc := t.TempDir()
	if err := os.MkdirAll(filepath.Join(proc, "self"), 0o755); err != nil {
		t.Fatal(err)
	}
	info := "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n" +
		"23 22 8:1 / /home/u rw shared:2 - ext4 /dev/sda1 rw\n" +
		"24 23 0:5 / /home/u/my\\040mnt rw shared:3 - tmpfs tmpfs rw\n" +
		"25 22 0:6 / /home/user2 rw shared:4 - tmpfs tmpfs rw\n" +
		"26 23 0:7 / /home/u/.cache/x rw shared:5 - fuse.sshfs host: rw\n"
	if err := os.WriteFile(filepath.Join(proc, "self", "mountinfo"), []byte(info), 0o644); err != nil {
		t.Fatal(err)
	}
	want := []string{"/home/u/my mnt", "/home/u/.cache/x"}
	for _, home := range []string{"/home/u", "/home/u/"} {
		if got := mountsBelow(proc, home); !reflect.DeepEqual(got, want) {
			t.Errorf("mountsBelow(%q) = %q, want %q", home, got, want)
		}
	}
	for _, home := range []string{"", "/", "/home/user2"} {
		if got := mountsBelow(proc, home); got != nil {
			t.Errorf("mountsBelow(%q) = %q, want none", home, got)
		}
	}
}
