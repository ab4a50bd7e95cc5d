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
