package adversarial

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// Host state that is not a file (P12): kernel tunables and triggers, kernel secrets,
// keyrings. The rows run as the test user and as root (whose uid the sandbox shares:
// the kernel lets uid 0 write /proc/sys by file mode alone), and check the host's
// values afterwards.

// hostTunables are the kernel values the attacks try to change, each with a value
// different from the host's, so a write that lands shows on the host.
var hostTunables = []struct {
	path  string
	other func(cur string) string
}{
	{"/proc/sys/kernel/core_pattern", func(string) string { return "|/tmp/agentbox-core-pwned" }},
	{"/proc/sys/vm/swappiness", func(cur string) string { return flip(cur, "13", "17") }},
	{"/proc/sys/net/ipv4/ip_forward", func(cur string) string { return flip(cur, "0", "1") }},
	{"/proc/sys/kernel/sysrq", func(cur string) string { return flip(cur, "0", "1") }},
	{"/proc/sys/vm/max_map_count", func(cur string) string { return flip(cur, "65531", "65533") }},
	{"/proc/irq/default_smp_affinity", func(cur string) string { return cur }}, // any write is the escape
}

func flip(cur, a, b string) string {
	if cur == a {
		return b
	}
	return a
}

// tunableScript tries each write from inside; TUNE_n_PATH and TUNE_n_VALUE come in
// the environment. A write that succeeds is an escape whatever its value.
func tunableScript(x *target) (script string, env []string, before map[string]string) {
	before = map[string]string{}
	var b strings.Builder
	b.WriteString(prelude)
	for i, tu := range hostTunables {
		cur, err := os.ReadFile(tu.path)
		if err != nil {
			continue // not on this kernel
		}
		v := strings.TrimSpace(string(cur))
		before[tu.path] = v
		n := strconv.Itoa(i)
		env = append(env, "TUNE_"+n+"_PATH="+tu.path, "TUNE_"+n+"_VALUE="+tu.other(v))
		b.WriteString(`try write-` + filepath.Base(tu.path) + ` sh -c 'printf "%s\n" "$TUNE_` + n + `_VALUE" > "$TUNE_` + n + `_PATH"'` + "\n")
	}
	b.WriteString(`
		# Every file below the kernel's tunables and triggers: none may be writable
		# but, for a user, its own namespaces' (the sandbox owns its IPC namespace's
		# sysctls: owner $NSOWNER) and ns_last_pid (mode 0666; it asks for
		# CAP_SYS_ADMIN in the sandbox's PID namespace). For root, none at all.
		try any-tunable-writable sh -c 'find /proc/sys /proc/irq /proc/bus /proc/fs /proc/sysrq-trigger -type f -writable -printf "%U %p\n" 2>/dev/null |
			grep -v "^$NSOWNER " | grep -v " $NSSKIP$" | grep .'
		# The sandbox's /proc as its last mount shows it: read-only for root.
		echo "PROCOPTS $(awk '$5=="/proc"{o=$6} END{print o}' /proc/self/mountinfo)"
		# The host network namespace's entries (no --offline), guarded by mode alone.
		try net-writable sh -c 'find /proc/self/net/ -type f -writable 2>/dev/null | grep .'
		try sysrq-trigger sh -c 'echo h > /proc/sysrq-trigger'
		try thp sh -c 'f=/sys/kernel/mm/transparent_hugepage/enabled; v=$(sed "s/.*\[\(.*\)\].*/\1/" $f) && echo "$v" > $f'
		try uevent-helper sh -c 'echo "$REPO/x" > /sys/kernel/uevent_helper'
		try remount-proc-sys-rw mount -o remount,rw /proc/sys
		try umount-proc-sys umount /proc/sys
		try nested-proc-core-pattern sh -c 'unshare -Urpf --mount-proc sh -c "echo x > /proc/sys/kernel/core_pattern"'
		try nested-sysfs-thp sh -c 'unshare -Urmn sh -c "mount -t sysfs s /sys && echo never > /sys/kernel/mm/transparent_hugepage/enabled"'
		# Kernel secrets a user cannot read, which uid 0 could by file mode.
		try read-timer-list sh -c 'grep -q . /proc/timer_list'
		try read-kpageflags sh -c 'test "$(head -c 8 /proc/kpageflags | wc -c)" = 8'
		try read-kcore sh -c 'test "$(head -c 1 /proc/kcore | wc -c)" = 1'
		try read-acpi-tables sh -c 'for f in /sys/firmware/acpi/tables/*; do test "$(head -c 1 "$f" | wc -c)" = 1 && exit 0; done; exit 1'
		echo DONE
`)
	return b.String(), env, before
}

// TestKernelTunables: neither the test user nor root can change a kernel tunable,
// pull a sysrq trigger, or read the kernel's secrets from inside, on either backend;
// the host's values are the same afterwards.
func TestKernelTunables(t *testing.T) {
	for _, backend := range sandboxtest.Backends(t) {
		for _, root := range []bool{false, true} {
			name := backend + "/user"
			if root {
				name = backend + "/root"
			}
			t.Run(name, func(t *testing.T) {
				if root && os.Geteuid() != 0 {
					testenv.Skip(t, "needs root: runs agentbox as root")
				}
				x := newTarget(t, backend)
				script, env, before := tunableScript(x)
				if before["/proc/sys/kernel/core_pattern"] == "" {
					t.Fatal("no kernel.core_pattern on the host")
				}
				t.Cleanup(func() { restoreTunables(t, before) })
				cmd := x.Command(x.Repo, nil, script)
				cmd.Env = append(cmd.Env, env...)
				if root {
					chownTree(t, x.Repo, 0)
					cmd.Env = append(cmd.Env, rootOwnState(t)...) // agentbox writes no other user's state
					cmd.SysProcAttr = nil                         // stay root
					cmd.Env = append(cmd.Env, "NSOWNER=none", "NSSKIP=none")
				} else {
					cmd.Env = append(cmd.Env, "NSOWNER="+strconv.Itoa(int(testenv.TestUser(t).UID)), "NSSKIP=/proc/sys/kernel/ns_last_pid")
				}
				r := sandboxtest.Run(cmd)
				attempts.Add(int64(strings.Count(r.Stdout, "TRY ")))
				if r.Code != 0 || !strings.Contains(r.Stdout, "DONE") {
					t.Fatalf("session: %s", r)
				}
				if strings.Contains(r.Stdout, "ESCAPED") {
					t.Errorf("escapes:\n%s", r.Stdout)
				}
				// Root's whole /proc is read-only (its per-process net entries cannot be
				// covered one by one); a user's stays writable for nested proc mounts.
				if want := map[bool]string{true: "PROCOPTS ro,", false: "PROCOPTS rw,"}[root]; !strings.Contains(r.Stdout, want) {
					t.Errorf("want %q:\n%s", want, r.Stdout)
				}
				for p, v := range before {
					if now := readTrim(p); now != v {
						t.Errorf("host %s changed: %q, was %q", p, now, v)
					}
				}
			})
		}
	}
}

func readTrim(p string) string {
	b, _ := os.ReadFile(p)
	return strings.TrimSpace(string(b))
}

// restoreTunables puts back a value an escape changed, so one failing row does not
// leave the machine altered.
func restoreTunables(t *testing.T, before map[string]string) {
	for p, v := range before {
		if readTrim(p) != v {
			if err := os.WriteFile(p, []byte(v+"\n"), 0); err != nil {
				t.Logf("restore %s: %v", p, err)
			}
		}
	}
}

// chownTree gives a tree to uid (and gid) uid: root's session on a repository root
// owns, as root's own would be.
func chownTree(t *testing.T, dir string, uid int) {
	t.Helper()
	err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err == nil {
			err = os.Lchown(p, uid, uid)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// keyringHost runs on the host, as the test user, in a session keyring of its own
// (keyctl session), with the user keyring linked into it as pam_keyinit does at
// login: it puts a key in, runs the agentbox session ("$@"), and prints what the
// keyrings hold before and after.
const keyringHost = `set -e
K=$(keyctl add user agentbox-hostkey host-secret @s)
keyctl link @u @s
U=$(keyctl search @s keyring _uid.$(id -u))
S=$(keyctl show @s | sed -n 's/^ *\([0-9]*\) .*keyring: _ses.*/\1/p' | head -1)
export K U S
state() { echo "$1 key=$(keyctl pipe $K) s=[$(keyctl rlist @s)] u=[$(keyctl rlist @u)] perm=$(keyctl rdescribe $K | cut -d';' -f4)"; }
state BEFORE
set +e
"$@"
echo "SESSION-EXIT $?"
state AFTER
`

// keyringScript attacks the host's keys from inside: by serial number (the key, the
// session and the user keyring, as /proc/keys would list them) and by the special
// ids @s and @u, with every keyctl operation that reads or changes.
const keyringScript = prelude + `
try read-key keyctl pipe "$K"
try read-key-search sh -c 'keyctl search @s user agentbox-hostkey'
try describe-key keyctl rdescribe "$K"
try update-key keyctl update "$K" pwned
try setperm-key keyctl setperm "$K" 0x3f3f3f3f
try add-to-session keyctl add user agentbox-planted x @s
try add-to-session-serial keyctl add user agentbox-planted x "$S"
try add-to-user keyctl add user agentbox-planted x @u
try add-to-user-serial keyctl add user agentbox-planted x "$U"
try link-into-user keyctl link "$K" "$U"
try unlink-from-session keyctl unlink "$K" "$S"
try clear-user keyctl clear "$U"
try request-key keyctl request user agentbox-hostkey
try new-session keyctl session agentbox-sandbox true
try invalidate-key keyctl invalidate "$K"
try revoke-key keyctl revoke "$K"
echo DONE
`

// TestKeyrings: kernel keyrings are not namespaced, so nothing inside may read or
// change the launching user's keys (or root's), on either backend; the host's
// keyrings hold afterwards exactly what they held before.
func TestKeyrings(t *testing.T) {
	if _, err := exec.LookPath("keyctl"); err != nil {
		t.Fatalf("keyctl (keyutils) missing: run scripts/setup-test-env.sh")
	}
	for _, backend := range sandboxtest.Backends(t) {
		for _, root := range []bool{false, true} {
			name := backend + "/user"
			if root {
				name = backend + "/root"
			}
			t.Run(name, func(t *testing.T) { keyringRow(t, backend, root) })
		}
	}
}

func keyringRow(t *testing.T, backend string, root bool) {
	if root && os.Geteuid() != 0 {
		testenv.Skip(t, "needs root: runs agentbox as root")
	}
	x := newTarget(t, backend)
	cmd := x.Command(x.Repo, nil, keyringScript)
	if root {
		chownTree(t, x.Repo, 0)
		cmd.Env = append(cmd.Env, rootOwnState(t)...) // agentbox writes no other user's state
		cmd.SysProcAttr = nil                         // stay root
	}
	keyctl, _ := exec.LookPath("keyctl")
	cmd.Args = append([]string{keyctl, "session", "-", "sh", "-c", keyringHost, "sh", cmd.Path}, cmd.Args[1:]...)
	cmd.Path = keyctl
	r := sandboxtest.Run(cmd)
	attempts.Add(int64(strings.Count(r.Stdout, "TRY ")))
	if !strings.Contains(r.Stdout, "SESSION-EXIT 0") || !strings.Contains(r.Stdout, "DONE") {
		t.Fatalf("session: %s", r)
	}
	if strings.Contains(r.Stdout, "ESCAPED") {
		t.Errorf("escapes:\n%s", r.Stdout)
	}
	var before, after string
	for _, l := range strings.Split(r.Stdout, "\n") {
		if v, ok := strings.CutPrefix(l, "BEFORE "); ok {
			before = v
		}
		if v, ok := strings.CutPrefix(l, "AFTER "); ok {
			after = v
		}
	}
	if before == "" || !strings.Contains(before, "key=host-secret") || after != before {
		t.Errorf("host keyrings before:\n%s\nafter:\n%s", before, after)
	}
}

// rootOwnState gives root agentbox's state and cache directories of its own, in a
// directory only root can write, for a root launch with the test user's HOME:
// agentbox refuses state another user could swap (policy.CheckPrivate), and the
// test user owns HOME. It returns the environment that points there.
func rootOwnState(t *testing.T) []string {
	d, err := os.MkdirTemp("/var/tmp", "agentbox-root-state-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return []string{"XDG_STATE_HOME=" + d + "/state", "XDG_CACHE_HOME=" + d + "/cache"}
}
