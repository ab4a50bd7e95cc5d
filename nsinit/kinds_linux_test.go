package nsinit

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/nsinit/program"
)

// runner is one way to carry out a compiled plan.
type runner struct {
	name string
	raw  bool   // Options.RawInit
	env  string // set in the launcher's environment for the launch
	// phase must be among the launch's phases: proof that this runner ran (the raw
	// init's "idmap", the Go init's "init-start", a fallback's "remount /").
	phase string
	extra []mounts.Op // added to every plan (for its phase)
}

// runners are the native backend's runners of one program: the raw init where this
// build and kernel have it, the Go init, and the Go init with every old-kernel
// fallback compiled in (program.EnvFallbacks).
func runners() []runner {
	list := []runner{
		{name: "go", phase: "init-start"},
		// The extra cover's remount is a phase of its own (the root's is the
		// "ro-bind /" phase).
		{name: "go-fallbacks", env: program.EnvFallbacks + "=1", phase: "remount /proc/sys", extra: []mounts.Op{{Kind: mounts.ReadOnly, Dest: "/proc/sys"}}},
	}
	if rawUsable() {
		list = append(list, runner{name: "raw", raw: true, phase: "idmap"})
	}
	return list
}

// setEnv puts the runner's variable (env) in the launcher's environment for t.
func (r runner) setEnv(t *testing.T) {
	if name, value, ok := strings.Cut(r.env, "="); ok {
		t.Setenv(name, value)
	}
}

// TestEveryKindEveryRunner walks mounts.Kinds through every runner of the compiled
// plan: each kind in a plan of its own, checked from inside by what it must do (and
// from the host, where it writes). compat's TestArgvKinds walks the same list
// through bwrap's argv, and test/behaviour runs the whole table on each runner and
// on bwrap. A kind added to mounts.Kinds without a row here fails. Every row also
// checks that no mount inside is shared or a slave: the kernel matrix's VMs mount
// their filesystems shared, as systemd does.
func TestEveryKindEveryRunner(t *testing.T) {
	if !testenv.AsTestUser(t) {
		return
	}
	dir := testenv.Dir(t, "kinds") // not below /tmp, which the plan covers
	mk := func(rel, content string) string {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if content != "" {
			if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return p
	}
	roSrc := filepath.Dir(mk("ro-src/f", "ro\n"))
	roDest := filepath.Dir(mk("ro-dest/.keep", "x"))
	rwSrc := filepath.Dir(mk("rw-src/f", "rw\n"))
	lower := filepath.Dir(mk("lower/f", "lower\n"))
	maskDir := filepath.Dir(mk("mask-dir/secret", "secret\n"))
	maskFile := mk("mask-file", "secret\n")
	ifThere := mk("there.sock", "x")
	pidNS, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		t.Fatal(err)
	}
	hostPidNS := mk("host-pid-ns", pidNS)

	type row struct {
		ops    []mounts.Op
		script string
		after  func(t *testing.T) // on the host, after the session
	}
	rows := map[mounts.Kind]row{
		mounts.BindRO: {
			// With IfExists (a host socket's mask), a destination that is there is
			// covered, and one that is gone is skipped, not a failed launch.
			ops: []mounts.Op{{Kind: mounts.BindRO, Source: roSrc, Dest: roDest},
				{Kind: mounts.BindRO, Source: "/dev/null", Dest: ifThere, IfExists: true},
				{Kind: mounts.BindRO, Source: "/dev/null", Dest: filepath.Join(dir, "gone.sock"), IfExists: true}},
			script: `test "$(cat ` + roDest + `/f)" = ro && ! test -e ` + roDest + `/.keep && ! touch ` + roDest + `/g 2>/dev/null && test -c ` + ifThere + ` && ! test -e ` + dir + `/gone.sock`,
		},
		mounts.Bind: {
			ops:    []mounts.Op{{Kind: mounts.Bind, Source: rwSrc, Dest: "/tmp/a/rw"}},
			script: `test "$(cat /tmp/a/rw/f)" = rw && echo new > /tmp/a/rw/new`,
			after: func(t *testing.T) {
				if b, err := os.ReadFile(filepath.Join(rwSrc, "new")); err != nil || string(b) != "new\n" {
					t.Errorf("bind: the write did not reach the host: %q, %v", b, err)
				}
			},
		},
		mounts.Tmpfs: {
			ops:    []mounts.Op{{Kind: mounts.Tmpfs, Dest: "/tmp/t/u", Mode: 0o750}},
			script: `test "$(stat -c %a /tmp/t/u)" = 750 && touch /tmp/t/u/x && grep -q ' /tmp/t/u tmpfs ' /proc/self/mounts`,
		},
		mounts.Overlay: {
			ops:    []mounts.Op{{Kind: mounts.Overlay, Source: lower, Dest: lower}},
			script: `test "$(cat ` + lower + `/f)" = lower && echo inside > ` + lower + `/f && echo x > ` + lower + `/new && test "$(cat ` + lower + `/f)" = inside`,
			after: func(t *testing.T) {
				if b, _ := os.ReadFile(filepath.Join(lower, "f")); string(b) != "lower\n" {
					t.Errorf("overlay: the lower layer changed: %q", b)
				}
				if _, err := os.Lstat(filepath.Join(lower, "new")); err == nil {
					t.Error("overlay: a file made inside is on the host")
				}
			},
		},
		mounts.Proc: {
			script: `grep -q ' /proc proc ' /proc/self/mounts && grep -q '^Name:' /proc/1/status && test "$(readlink /proc/self/ns/pid)" != "$(cat ` + hostPidNS + `)"`,
		},
		mounts.Dev: {
			script: `test -c /dev/null && test -c /dev/urandom && test -L /dev/fd && test -d /dev/pts && test -d /dev/shm && test "$(ls /dev | wc -l)" -lt 20 && echo x > /dev/null`,
		},
		mounts.Device: {
			// A node below a directory the private /dev does not have, checked by
			// identity, opened with device access (the /dev tmpfs is nodev).
			ops:    []mounts.Op{{Kind: mounts.Device, Source: "/dev/zero", Dest: "/dev/agentbox-test/zero", SourceID: fileID(t, "/dev/zero")}},
			script: `test -c /dev/agentbox-test/zero && test "$(head -c 3 /dev/agentbox-test/zero | tr '\000' z)" = zzz`,
		},
		mounts.ReadOnly: {
			ops:    []mounts.Op{{Kind: mounts.ReadOnly, Dest: "/proc/sys"}},
			script: `grep ' /proc/sys ' /proc/self/mountinfo | grep -q ' ro[ ,]'`,
		},
		mounts.Mask: {
			ops: []mounts.Op{{Kind: mounts.Mask, Dest: maskDir}, {Kind: mounts.Mask, Dest: maskFile},
				{Kind: mounts.Mask, Dest: filepath.Join(dir, "never-there")}},
			script: `test -d ` + maskDir + ` && test -z "$(ls -A ` + maskDir + `)" && ! touch ` + maskDir + `/x 2>/dev/null && test -c ` + maskFile + ` && test -z "$(cat ` + maskFile + `)"`,
		},
	}
	for _, k := range mounts.Kinds {
		if _, ok := rows[k]; !ok {
			t.Errorf("kind %s has no row here", k)
		}
	}
	null := devNull(t)
	for _, r := range runners() {
		t.Run(r.name, func(t *testing.T) {
			r.setEnv(t)
			for _, k := range mounts.Kinds {
				row := rows[k]
				t.Run(string(k), func(t *testing.T) {
					if r.raw {
						waitRawFree(t)
					}
					// Every mount private, whatever the host's propagation: no
					// mount the host makes later can arrive (docs/security.md).
					script := row.script + ` && ! grep -E ' (shared|master):[0-9]' /proc/self/mountinfo`
					plan := minimalPlan("/bin/sh", "-c", script)
					plan.Ops = append(append(plan.Ops, row.ops...), r.extra...)
					res, err := Run(plan, Options{Stdio: Stdio{Stdin: null, Stdout: os.Stderr, Stderr: os.Stderr}, RawInit: r.raw})
					if err != nil || res.Status != 0 {
						t.Fatalf("%s: %v, status %d", script, err, res.Status)
					}
					if !slices.Contains(phaseNames(res), r.phase) {
						t.Errorf("phases %v, want %q: not the %s runner", phaseNames(res), r.phase, r.name)
					}
					if row.after != nil {
						row.after(t)
					}
				})
			}
		})
	}
}

// fileID is path's identity, as the launcher records it (mounts.Op.SourceID).
func fileID(t *testing.T, path string) mounts.FileID {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return mounts.FileID{Dev: st.Dev, Ino: st.Ino}
}

func minimalPlan(cmd ...string) mounts.Plan {
	return mounts.Plan{
		Ops: []mounts.Op{
			{Kind: mounts.BindRO, Source: "/", Dest: "/"},
			{Kind: mounts.Proc, Dest: "/proc"},
			{Kind: mounts.Dev, Dest: "/dev"},
			{Kind: mounts.Tmpfs, Dest: "/tmp", Mode: 0o1777},
		},
		Workdir: "/",
		Command: cmd,
	}
}

// devNull is /dev/null opened for reading and writing, closed with the test.
func devNull(t *testing.T) *os.File {
	t.Helper()
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { null.Close() })
	return null
}

func phaseNames(res Result) []string {
	var names []string
	for _, p := range res.Phases {
		names = append(names, p.Name)
	}
	return names
}
