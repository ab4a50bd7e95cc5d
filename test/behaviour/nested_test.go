package behaviour

import (
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestNestedSandboxes: agents build sandboxes of their own inside agentbox (Claude
// Code's and srt's bubblewrap, unshare-based ones), so a user's sandbox keeps nested
// user, mount, PID, network and cgroup namespaces and a fresh proc mount working —
// which is why the host-root covers of /proc (P12) are not put on a user's sandbox:
// locked mounts over /proc make the kernel refuse that proc mount. And nested, the
// filters of the outer sandbox still hold (the keyring calls stay refused). With
// --nested-sandbox, which on Linux 7.1+ trades Landlock's deny of host path sockets
// (its domain refuses every mount) for the masks; the kernel matrix runs this on 7.x.
func TestNestedSandboxes(t *testing.T) {
	bwrap := sandboxtest.BwrapPath(t)
	if bwrap == "" {
		bwrap = testenv.SetupFile(t, sandboxtest.BuiltBwrap, "bubblewrap 0.12.0 to run nested")
	}
	script := `set -e
		echo "userns $(unshare -Ur id -u)"
		echo "pidns $(unshare -Urpf --mount-proc sh -c 'echo $$ $(cat /proc/1/comm); true')"
		echo "all $(unshare -Urmpfnic --mount-proc sh -c 'ip -o link | wc -l')"
		"$BWRAP" --unshare-all --die-with-parent --ro-bind / / --proc /proc --dev /dev --tmpfs /tmp \
			sh -c 'echo "bwrap $(cat /proc/1/comm) $(id -u)"; touch /tmp/x'
		"$BWRAP" --unshare-user --unshare-pid --unshare-net --ro-bind / / --proc /proc --dev /dev \
			--bind "$REPO" "$REPO" sh -c 'echo nested > "$REPO/nested-write"'
		echo "repo $(cat nested-write)"
		unshare -Ur keyctl show @s >/dev/null 2>&1 && echo NESTED-KEYCTL
		echo DONE`
	for _, backend := range backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := newBox(t, backend)
			cmd := b.command(b.repo, []string{"--nested-sandbox"}, script)
			cmd.Env = append(cmd.Env, "BWRAP="+bwrap)
			r := run(cmd)
			if r.code != 0 {
				t.Fatalf("%s", r)
			}
			for _, want := range []string{"userns 0\n", "pidns 1 sh\n", "all 1\n", "bwrap bwrap ", "repo nested\n", "DONE\n"} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("nested: want %q in:\n%s", want, r)
				}
			}
			if strings.Contains(r.stdout, "NESTED-KEYCTL") {
				t.Errorf("keyctl works in a nested user namespace:\n%s", r.stdout)
			}
		})
	}
}
