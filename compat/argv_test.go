package compat

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/mounts/build"
	"github.com/agentbox/agentbox/policy"
)

// fakeLower stands in for the host's stat of an overlay source: a 0750 directory of
// the caller's.
func fakeLower(string) (uint32, error) { return 0o750, nil }

// argvOf is Argv with fakeLower, for plans whose paths do not exist here.
func argvOf(plan mounts.Plan) ([]string, error) {
	g, err := groups(plan, fakeLower, nil)
	var argv []string
	for _, x := range g {
		argv = append(argv, x...)
	}
	return argv, err
}

// prologue is what every argv starts with.
var prologue = []string{
	"--unshare-user", "--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup",
	"--die-with-parent", "--cap-drop", "ALL",
}

// TestArgvEveryKind walks every operation kind the plan can hold: each must have a
// bwrap translation, and this table must know it, so a new kind fails here until both
// backends handle it.
func TestArgvEveryKind(t *testing.T) {
	want := map[mounts.Kind][]string{
		mounts.BindRO:  {"--ro-bind", "/src", "/dst"},
		mounts.Bind:    {"--bind", "/src", "/dst"},
		mounts.Tmpfs:   {"--perms", "0750", "--tmpfs", "/dst"},
		mounts.Overlay: {"--overlay-src", "/src", "--tmp-overlay", "/dst", "--chmod", "0750", "/dst"},
		mounts.Proc:    {"--proc", "/dst"},
		mounts.Dev:     {"--dev", "/dst"},
		mounts.Device:  {"--dev-bind", "/src", "/dst"},
		// ReadOnly and Mask look at the host's Dest (here: kernel files every Linux has).
		mounts.ReadOnly: {"--ro-bind", "/proc/sys", "/proc/sys"},
		mounts.Mask:     {"--perms", "0555", "--tmpfs", "/proc/sys", "--remount-ro", "/proc/sys"},
	}
	for _, k := range mounts.Kinds {
		op := mounts.Op{Kind: k, Dest: "/dst"}
		switch k {
		case mounts.ReadOnly, mounts.Mask:
			op.Dest = "/proc/sys"
		case mounts.BindRO, mounts.Bind, mounts.Overlay, mounts.Device:
			op.Source = "/src"
		case mounts.Tmpfs:
			op.Mode = 0o750
		}
		argv, err := argvOf(mounts.Plan{Ops: []mounts.Op{op}, Workdir: "/", Command: []string{"true"}})
		if err != nil {
			t.Errorf("kind %s: %v", k, err)
			continue
		}
		w, ok := want[k]
		if !ok {
			t.Errorf("kind %s: translated to %q, but this test does not know the kind", k, argv)
			continue
		}
		got := argv[len(prologue) : len(argv)-4]
		if !reflect.DeepEqual(got, w) {
			t.Errorf("kind %s: %q, want %q", k, got, w)
		}
	}
	if len(want) != len(mounts.Kinds) {
		t.Errorf("table has %d kinds, mounts.Kinds %d", len(want), len(mounts.Kinds))
	}

	_, err := argvOf(mounts.Plan{Ops: []mounts.Op{{Kind: "frobnicate", Dest: "/x"}}, Workdir: "/", Command: []string{"true"}})
	if err == nil || !strings.Contains(err.Error(), `"frobnicate" has no bwrap translation`) {
		t.Errorf("unknown kind: %v, want an error naming it", err)
	}
}

// TestArgvCovers checks the translations of ReadOnly and Mask that depend on the
// host's Dest: a file is masked with the null device, a missing Dest gives nothing.
func TestArgvCovers(t *testing.T) {
	for _, c := range []struct {
		op   mounts.Op
		want []string
	}{
		{mounts.Op{Kind: mounts.Mask, Dest: "/proc/version"}, []string{"--ro-bind", "/dev/null", "/proc/version"}},
		{mounts.Op{Kind: mounts.Mask, Dest: "/proc/agentbox-no-such-file"}, nil},
		{mounts.Op{Kind: mounts.ReadOnly, Dest: "/proc/agentbox-no-such-file"}, nil},
		// A host socket's mask (IfExists): bound when the socket is there, left out
		// when it is gone; without IfExists a missing destination is bwrap's to refuse.
		{mounts.Op{Kind: mounts.BindRO, Source: "/dev/null", Dest: "/proc/version", IfExists: true}, []string{"--ro-bind", "/dev/null", "/proc/version"}},
		{mounts.Op{Kind: mounts.BindRO, Source: "/dev/null", Dest: "/proc/agentbox-no-such-file", IfExists: true}, nil},
		{mounts.Op{Kind: mounts.BindRO, Source: "/dev/null", Dest: "/proc/agentbox-no-such-file"}, []string{"--ro-bind", "/dev/null", "/proc/agentbox-no-such-file"}},
	} {
		argv, err := argvOf(mounts.Plan{Ops: []mounts.Op{c.op}, Workdir: "/", Command: []string{"true"}})
		if err != nil {
			t.Fatalf("%v: %v", c.op, err)
		}
		if got := argv[len(prologue) : len(argv)-4]; !reflect.DeepEqual(got, c.want) && len(got)+len(c.want) > 0 {
			t.Errorf("%v: %q, want %q", c.op, got, c.want)
		}
	}
	// The sandbox's own /proc is remounted, never replaced by a bind of the host's.
	argv, err := argvOf(mounts.Plan{Ops: []mounts.Op{{Kind: mounts.Proc, Dest: "/proc"}, {Kind: mounts.ReadOnly, Dest: "/proc"}}, Workdir: "/", Command: []string{"true"}})
	if got := argv[len(prologue) : len(argv)-4]; err != nil || !reflect.DeepEqual(got, []string{"--proc", "/proc", "--remount-ro", "/proc"}) {
		t.Errorf("read-only /proc: %q, %v", got, err)
	}
	if _, err := argvOf(mounts.Plan{Ops: []mounts.Op{{Kind: mounts.Mask, Source: "/x", Dest: "/proc/version"}}, Workdir: "/", Command: []string{"true"}}); err == nil {
		t.Error("a mask with a source was translated")
	}
}

// TestArgvBuild checks the whole argv for a plan built the way agentbox builds it.
func TestArgvBuild(t *testing.T) {
	p := &policy.Policy{
		Repo: "/home/u/repo", Home: "/home/u", Workdir: "/home/u/repo/sub", Offline: true,
		Backend: policy.BackendBwrap, Command: []string{"sh", "-c", "echo 'hi'; exit 3"},
	}
	plan := build.Plan(p, mounts.Session{
		Protected: []mounts.Protected{{Path: "/home/u/repo/.git/config"}, {Path: "/home/u/repo/.git/hooks", Dir: true}},
	})
	g, err := commandGroups("/opt/bwrap", plan, fakeLower, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, x := range g {
		got = append(got, x...)
	}
	want := []string{
		"/opt/bwrap", "--json-status-fd", "3", "--add-seccomp-fd", "4",
		"--unshare-user", "--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup", "--unshare-net",
		"--die-with-parent", "--cap-drop", "ALL",
		"--ro-bind", "/", "/",
		"--proc", "/proc",
		"--dev", "/dev",
		"--perms", "1777", "--tmpfs", "/tmp",
		"--perms", "0755", "--tmpfs", "/run",
		"--overlay-src", "/home/u", "--tmp-overlay", "/home/u", "--chmod", "0750", "/home/u",
		"--bind", "/home/u/repo", "/home/u/repo",
		"--ro-bind", "/home/u/repo/.git/config", "/home/u/repo/.git/config",
		"--ro-bind", "/home/u/repo/.git/hooks", "/home/u/repo/.git/hooks",
		"--chdir", "/home/u/repo/sub",
		"--", "sh", "-c", "echo 'hi'; exit 3",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Command =\n%q\nwant\n%q", got, want)
	}

	// Without --offline the network is shared; --disk-tmp binds a directory at /tmp.
	p.Offline = false
	plan = build.Plan(p, mounts.Session{DiskTmp: "/home/u/.cache/agentbox/tmp/s1"})
	argv, err := argvOf(plan)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Join(argv, " ")
	if strings.Contains(s, "--unshare-net") {
		t.Errorf("--unshare-net without Namespaces.Net: %s", s)
	}
	if !strings.Contains(s, "--dev /dev --bind /home/u/.cache/agentbox/tmp/s1 /tmp --perms 0755 --tmpfs /run") {
		t.Errorf("--disk-tmp not bound at /tmp in order: %s", s)
	}
}

func TestArgvRefuses(t *testing.T) {
	ok := mounts.Plan{Ops: []mounts.Op{{Kind: mounts.BindRO, Source: "/", Dest: "/"}}, Workdir: "/", Command: []string{"true"}}
	tests := []struct {
		name string
		edit func(p *mounts.Plan)
		want string
	}{
		{"relative dest", func(p *mounts.Plan) { p.Ops[0].Dest = "x" }, `destination "x" is not an absolute path`},
		{"empty source", func(p *mounts.Plan) { p.Ops[0].Source = "" }, `source "" is not an absolute path`},
		{"NUL in source", func(p *mounts.Plan) { p.Ops[0].Source = "/a\x00b" }, "NUL byte"},
		{"source on proc", func(p *mounts.Plan) { p.Ops[0] = mounts.Op{Kind: mounts.Proc, Source: "/x", Dest: "/proc"} }, "which proc does not take"},
		{"mode on bind", func(p *mounts.Plan) { p.Ops[0].Mode = 0o755 }, "which ro-bind does not take"},
		{"tmpfs mode beyond permissions", func(p *mounts.Plan) { p.Ops[0] = mounts.Op{Kind: mounts.Tmpfs, Dest: "/tmp", Mode: 0o17777} }, "beyond permissions"},
		{"relative workdir", func(p *mounts.Plan) { p.Workdir = "repo" }, "working directory"},
		{"no command", func(p *mounts.Plan) { p.Command = nil }, "no command"},
		{"NUL in argument", func(p *mounts.Plan) { p.Command = []string{"echo", "a\x00"} }, "command argument 1"},
	}
	for _, tt := range tests {
		p := ok
		p.Ops = append([]mounts.Op(nil), ok.Ops...)
		tt.edit(&p)
		if argv, err := argvOf(p); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Argv = %q, %v; want an error saying %q", tt.name, argv, err, tt.want)
		}
	}
	if _, err := argvOf(ok); err != nil {
		t.Errorf("the unedited plan: %v", err)
	}
}

// TestQuote checks that bash reads every quoted string back as the original.
func TestQuote(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Fatalf("bash is needed to check the quoting: %v", err)
	}
	in := []string{
		"", "plain", "/a/b-c_d.e", "a b", "it's", `"dq"`, "$HOME", "`x`", "a\\b", "semi;colon",
		"new\nline", "tab\there", "\x01ctl", "caf\u00e9", "\xff\xfeinvalid", "\ufffd", "'", "''", "*?[",
		"-- --bind / /", "~user", "#comment",
	}
	unchanged := map[string]bool{"plain": true, "/a/b-c_d.e": true}
	var script strings.Builder
	script.WriteString("printf '%s\\0'")
	for _, s := range in {
		q := Quote(s)
		if unchanged[s] != (q == s) {
			t.Errorf("Quote(%q) = %s", s, q)
		}
		if strings.Contains(q, "\n") {
			t.Errorf("Quote(%q) = %s spans lines", s, q)
		}
		script.WriteString(" " + q)
	}
	out, err := exec.Command("bash", "-c", script.String()).Output()
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	if !reflect.DeepEqual(got, in) {
		t.Errorf("bash read back\n%q\nwant\n%q", got, in)
	}
}

// TestFormat checks the dry-run layout: one option with its arguments per line, and
// that a shell reads it back to the exact argv.
func TestFormat(t *testing.T) {
	plan := mounts.Plan{
		Ops: []mounts.Op{
			{Kind: mounts.BindRO, Source: "/", Dest: "/"},
			{Kind: mounts.Tmpfs, Dest: "/tmp", Mode: 0o1777},
			{Kind: mounts.Bind, Source: "/home/u/my repo", Dest: "/home/u/my repo"},
		},
		Workdir: "/home/u/my repo", Command: []string{"sh", "-c", "echo $HOME"},
	}
	g, err := commandGroups("/usr/bin/bwrap", plan, fakeLower, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := Format(g)
	want := `/usr/bin/bwrap \
  --json-status-fd 3 \
  --add-seccomp-fd 4 \
  --unshare-user \
  --unshare-ipc \
  --unshare-pid \
  --unshare-uts \
  --unshare-cgroup \
  --die-with-parent \
  --cap-drop ALL \
  --ro-bind / / \
  --perms 1777 --tmpfs /tmp \
  --bind '/home/u/my repo' '/home/u/my repo' \
  --chdir '/home/u/my repo' \
  -- sh -c 'echo $HOME'
`
	if got != want {
		t.Errorf("Format =\n%s\nwant\n%s", got, want)
	}
	argv, _ := Command("/usr/bin/bwrap", plan)
	out, err := exec.Command("bash", "-c", "printf '%s\\0' "+strings.TrimSuffix(got, "\n")).Output()
	if err != nil {
		t.Fatal(err)
	}
	if back := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00"); !reflect.DeepEqual(back, argv) {
		t.Errorf("shell read back %q, want %q", back, argv)
	}
}

// parseArgv is the inverse of Argv, written independently from the option table of
// bwrap's manual: it rebuilds the plan (without the Why texts) from an argv.
func parseArgv(argv []string) (mounts.Plan, error) {
	var p mounts.Plan
	seen := map[string]bool{}
	need := func(i, n int) error {
		if i+n >= len(argv) {
			return fmt.Errorf("%s needs %d arguments", argv[i], n)
		}
		return nil
	}
	for i := 0; i < len(argv); i++ {
		a := argv[i]
		switch a {
		case "--unshare-user", "--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup", "--die-with-parent":
			seen[a] = true
		case "--unshare-net":
			p.Namespaces.Net = true
		case "--cap-drop":
			if err := need(i, 1); err != nil || argv[i+1] != "ALL" {
				return p, fmt.Errorf("--cap-drop without ALL")
			}
			seen[a] = true
			i++
		case "--ro-bind", "--bind", "--dev-bind":
			if err := need(i, 2); err != nil {
				return p, err
			}
			k := mounts.Bind
			switch a {
			case "--ro-bind":
				k = mounts.BindRO
			case "--dev-bind":
				k = mounts.Device
			}
			p.Ops = append(p.Ops, mounts.Op{Kind: k, Source: argv[i+1], Dest: argv[i+2]})
			i += 2
		case "--perms":
			if err := need(i, 3); err != nil || argv[i+2] != "--tmpfs" {
				return p, fmt.Errorf("--perms not followed by --tmpfs")
			}
			m, err := strconv.ParseUint(argv[i+1], 8, 32)
			if err != nil || len(argv[i+1]) != 4 {
				return p, fmt.Errorf("--perms %q", argv[i+1])
			}
			p.Ops = append(p.Ops, mounts.Op{Kind: mounts.Tmpfs, Dest: argv[i+3], Mode: uint32(m)})
			i += 3
		case "--overlay-src":
			if err := need(i, 6); err != nil || argv[i+2] != "--tmp-overlay" || argv[i+4] != "--chmod" || argv[i+6] != argv[i+3] {
				return p, fmt.Errorf("--overlay-src not followed by --tmp-overlay and --chmod of its root")
			}
			if argv[i+5] != "0750" {
				return p, fmt.Errorf("overlay root mode %s, want the lower's", argv[i+5])
			}
			p.Ops = append(p.Ops, mounts.Op{Kind: mounts.Overlay, Source: argv[i+1], Dest: argv[i+3]})
			i += 6
		case "--proc", "--dev":
			if err := need(i, 1); err != nil {
				return p, err
			}
			k := mounts.Proc
			if a == "--dev" {
				k = mounts.Dev
			}
			p.Ops = append(p.Ops, mounts.Op{Kind: k, Dest: argv[i+1]})
			i++
		case "--chdir":
			if err := need(i, 1); err != nil {
				return p, err
			}
			p.Workdir = argv[i+1]
			i++
		case "--":
			p.Command = argv[i+1:]
			for _, s := range []string{"--unshare-user", "--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup", "--die-with-parent", "--cap-drop"} {
				if !seen[s] {
					return p, fmt.Errorf("%s missing", s)
				}
			}
			return p, nil
		default:
			return p, fmt.Errorf("unexpected argument %q", a)
		}
	}
	return p, fmt.Errorf("no --")
}

// FuzzArgv feeds plans (as JSON) through the translation: whatever Argv accepts must
// parse back, option by option, to the same plan, and carry no NUL byte. The seed
// corpus is in testdata/fuzz/FuzzArgv.
func FuzzArgv(f *testing.F) {
	p := &policy.Policy{Repo: "/r", Home: "/h", Workdir: "/r", Command: []string{"sh"}}
	b, _ := json.Marshal(build.Plan(p, mounts.Session{Protected: []mounts.Protected{{Path: "/r/.git/hooks"}}}))
	f.Add(b)
	f.Fuzz(func(t *testing.T, data []byte) {
		var plan mounts.Plan
		if json.Unmarshal(data, &plan) != nil {
			return
		}
		argv, err := argvOf(plan)
		if err != nil {
			return
		}
		for _, op := range plan.Ops {
			if op.Kind == mounts.ReadOnly || op.Kind == mounts.Mask {
				// Translated after a look at the host's Dest (TestArgvCovers): a
				// read-only bind of Dest, or nothing; no round trip.
				return
			}
		}
		for _, a := range argv {
			if strings.IndexByte(a, 0) >= 0 {
				t.Fatalf("NUL in argument %q", a)
			}
		}
		back, err := parseArgv(argv)
		if err != nil {
			t.Fatalf("Argv(%+v) = %q does not parse: %v", plan, argv, err)
		}
		for i := range plan.Ops {
			plan.Ops[i].Why = ""
		}
		if len(plan.Ops) == 0 {
			plan.Ops = nil
		}
		if !reflect.DeepEqual(back, plan) {
			t.Fatalf("Argv(%+v) = %q parses back to %+v", plan, argv, back)
		}
	})
}

// TestHostLower checks the host side on a real directory of the caller's.
func TestHostLower(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o710); err != nil {
		t.Fatal(err)
	}
	if m, err := hostLower(dir); err != nil || m != 0o710 {
		t.Errorf("hostLower(own 0710 dir) = %04o, %v", m, err)
	}
	if _, err := hostLower(filepath.Join(dir, "missing")); err == nil {
		t.Error("hostLower(missing) succeeded")
	}
}

// --allow-net's plan gets bwrap's new network namespace, as --offline's does; the
// proxy's socket is the init's to make inside.
func TestArgvAllowNet(t *testing.T) {
	plan := mounts.Plan{Namespaces: mounts.Namespaces{Net: true}, Proxy: mounts.ProxyAddr, Workdir: "/", Command: []string{"true"}}
	argv, err := Argv(plan)
	if err != nil || !slices.Contains(argv, "--unshare-net") {
		t.Errorf("argv %q %v", argv, err)
	}
}

// TestArgvTmpSize: every tmpfs of the plan gets the budget as bwrap's --size, and
// /dev/shm becomes such a tmpfs over bwrap's directory; HOME's overlay takes none.
func TestArgvTmpSize(t *testing.T) {
	p := &policy.Policy{Repo: "/home/u/repo", Home: "/home/u", Workdir: "/home/u/repo", Command: []string{"true"},
		KeepPrivate: []string{"/home/u/.claude/shell-snapshots"}, TmpSize: 8 << 20}
	argv, err := argvOf(build.Plan(p, mounts.Session{}))
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Join(argv, " ")
	for _, want := range []string{
		"--dev /dev --size 8388608 --perms 1777 --tmpfs /dev/shm ",
		"--size 8388608 --perms 1777 --tmpfs /tmp --size 8388608 --perms 0755 --tmpfs /run ",
		"--overlay-src /home/u --tmp-overlay /home/u --chmod 0750 /home/u ",
		"--size 8388608 --perms 0700 --tmpfs /home/u/.claude/shell-snapshots ",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("want %q in\n%s", want, s)
		}
	}
	if n := strings.Count(s, "--size"); n != 4 {
		t.Errorf("%d --size options, want 4: %s", n, s)
	}
}

// TestDeviceNeedsIdentity: a device operation without the identity the launcher
// verified (mounts.Op.SourceID) would have bwrap bind whatever is at its path at
// launch: the argv of a run is refused; with one, the device is bound from the
// descriptor Run opens and checks.
func TestDeviceNeedsIdentity(t *testing.T) {
	plan := mounts.Plan{
		Ops:     []mounts.Op{{Kind: mounts.BindRO, Source: "/", Dest: "/"}, {Kind: mounts.Device, Source: "/dev/zero", Dest: "/dev/zero"}},
		Workdir: "/", Command: []string{"true"},
	}
	if _, _, _, err := InitCommand("/usr/bin/bwrap", plan, "/usr/bin/agentbox"); err == nil || !strings.Contains(err.Error(), "no identity") || !strings.Contains(err.Error(), "/dev/zero") {
		t.Errorf("InitCommand: %v, want the device refused", err)
	}
	if _, err := Command("/usr/bin/bwrap", plan); err == nil || !strings.Contains(err.Error(), "no identity") {
		t.Errorf("Command: %v, want the device refused", err)
	}
	plan.Ops[1].SourceID = mounts.FileID{Dev: 5, Ino: 6}
	argv, sources, _, err := InitCommand("/usr/bin/bwrap", plan, "/usr/bin/agentbox")
	if err != nil || !slices.Equal(sources, []string{"/dev/zero", selfExe}) || !strings.Contains(strings.Join(argv, " "), fmt.Sprintf("--dev-bind /proc/self/fd/%d /dev/zero", FirstSourceFD)) {
		t.Errorf("with its identity: %q, %q, %v", argv, sources, err)
	}
}
