package behaviour

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/kernel"
	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// connectScript defines tryconnect: `tryconnect NAME PATH` prints "NAME reached"
// when a stream connect(2) to the path socket PATH succeeds, "NAME refused" when
// not. Perl's builtins only (the kernel matrix's VMs have no Perl modules).
const connectScript = `tryconnect() { if perl -e 'socket(S, 1, 1, 0) or die; connect(S, pack("S Z*", 1, $ARGV[0])) or exit 1' "$2" 2>/dev/null; then echo "$1 reached"; else echo "$1 refused"; fi; }
`

// hostPathSockets (P4): a host daemon's path socket outside /tmp and /run is
// unreachable inside, whether it listened before the launch (masked, or denied by
// Landlock's resolve-unix rule on Linux 7.1+) or started listening while the
// session runs — which only Landlock covers: with masks alone that one is
// reachable, as the README's P4 line says. The sandbox's own sockets, in the
// repository and in /tmp, stay reachable, and a file still moves between two
// directories of the repository (the Landlock domain allows links and renames).
func hostPathSockets(t *testing.T, b *box) {
	outside := testenv.Dir(t, "daemons")
	testenv.Chown(t, outside)
	early := filepath.Join(outside, "early.sock")
	late := filepath.Join(outside, "late.sock")
	testenv.ServeUnix(t, early, "agentbox-host")
	started := filepath.Join(b.repo, "started")
	script := connectScript + `tryconnect early "$EARLY"
		touch "$REPO/started"
		n=0; while [ ! -S "$LATE" ] && [ $n -lt 1200 ]; do sleep 0.05; n=$((n+1)); done
		tryconnect late "$LATE"
		perl -e 'for my $p (@ARGV) { unlink $p; socket(L, 1, 1, 0) or die; bind(L, pack("S Z*", 1, $p)) or die "bind $p: $!"; listen(L, 5) or die; socket(C, 1, 1, 0) or die; connect(C, pack("S Z*", 1, $p)) or die "connect $p: $!"; print "own $p reached\n"; close C; close L }' "$REPO/own.sock" /tmp/own.sock
		mkdir -p a b && echo x > a/f && mv a/f b/f && echo renamed
		unshare -Urm sh -c 'mount -t tmpfs none /mnt' 2>/dev/null && echo nested-mount ok || echo nested-mount refused`
	cmd := b.command(b.repo, nil, script)
	cmd.Env = append(cmd.Env, "EARLY="+early, "LATE="+late)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.WaitDelay = 10 * time.Second // a sandbox left holding the output pipes ends the wait
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// A minute: a launch under the kernel matrix's emulated CPUs takes seconds.
	if !sandboxtest.WaitForUpTo(time.Minute, func() bool { _, err := os.Lstat(started); return err == nil }) {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("the session did not start:\n%s\n%s", out.String(), errb.String())
	}
	testenv.ServeUnix(t, late, "agentbox-host")
	err := cmd.Wait()
	r := fromResult(sandboxtest.Result{Stdout: out.String(), Stderr: errb.String()})
	if err != nil {
		t.Fatalf("session failed (%v):\n%s", err, r)
	}
	lateWant := "late reached"
	if kernel.CanDenyPathSockets() {
		lateWant = "late refused"
	}
	for _, want := range []string{"early refused\n", lateWant + "\n", "own " + b.repo + "/own.sock reached\n", "own /tmp/own.sock reached\n", "renamed\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("want %q (Landlock resolve-unix: %v):\n%s", want, kernel.CanDenyPathSockets(), r)
		}
	}
	t.Logf("Landlock ABI %d; %s", kernel.LandlockABI(), strings.TrimSpace(grepLine(r.stdout, "nested-mount")))
}

// hostSocketsMechanism (P4): the dry run says how the command is kept off the
// host's path sockets: Landlock's resolve-unix rule where the kernel has it (Linux
// 7.1+), unless --nested-sandbox, which masks the sockets found at launch instead so
// that the command can mount; masks either way before 7.1. The JSON plan says it on
// every door and backend, the text plan (bwrap's argv: a comment) in words. With
// --nested-sandbox an unprivileged mount in a nested namespace works inside, on
// every kernel.
func hostSocketsMechanism(t *testing.T, b *box) {
	for _, nested := range []bool{false, true} {
		var flags []string
		if nested {
			flags = []string{"--nested-sandbox"}
		}
		deny := kernel.CanDenyPathSockets() && !nested
		r := b.sh("true", append([]string{"--dry-run", "--json"}, flags...)...)
		var plan struct {
			Deny bool `json:"deny_path_sockets"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &plan); r.code != 0 || err != nil || plan.Deny != deny {
			t.Errorf("dry run --json %v (Landlock ABI %d): deny_path_sockets %v, want %v (%v):\n%s", flags, kernel.LandlockABI(), plan.Deny, deny, err, r)
		}
		if b.backend == sandboxtest.GoAPI {
			continue // its door prints JSON only
		}
		want, not := "sockets  masked at launch", "landlock deny resolve-unix"
		if deny {
			want, not = not, want
		}
		r = b.sh("true", append([]string{"--dry-run"}, flags...)...)
		if r.code != 0 || !strings.Contains(r.stdout, want) || strings.Contains(r.stdout, not) {
			t.Errorf("dry run %v (Landlock ABI %d): want %q, not %q:\n%s", flags, kernel.LandlockABI(), want, not, r)
		}
	}
	out := b.ok(`unshare -Urm sh -c 'mount -t tmpfs none /tmp && echo nested-mount ok'`, "--nested-sandbox")
	if !strings.Contains(out, "nested-mount ok\n") {
		t.Errorf("--nested-sandbox: the command cannot mount (Landlock ABI %d):\n%s", kernel.LandlockABI(), out)
	}
}

// grepLine is the first line of s containing substr.
func grepLine(s, substr string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			return l
		}
	}
	return ""
}
