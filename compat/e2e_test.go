package compat_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/compat"
	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// realBwrap080 is bookworm's bubblewrap, unpacked by scripts/setup-test-env.sh.
const realBwrap080 = "/var/cache/agentbox-test/bwrap-0.8.0/usr/bin/bwrap"

func TestMain(m *testing.M) {
	// Run executes bwrap from the stage, the running binary: this test binary, which
	// is also the init bwrap starts.
	if compat.IsStage() {
		compat.StageMain()
	}
	initMain() // messages_linux_test.go
	code := m.Run()
	testenv.Cleanup()
	os.Exit(code)
}

// userFake writes a bwrap stand-in the test user can run: --version prints version;
// anything else would report a successful command. Each run appends its arguments
// (\x1f-separated) as one line to the returned log.
func userFake(t *testing.T, version string) (bin, log string) {
	t.Helper()
	dir := testenv.Dir(t, "fake-bwrap")
	bin, log = filepath.Join(dir, "bwrap"), filepath.Join(dir, "argv.log")
	script := "#!/bin/sh\nprintf '%s\\037' \"$@\" >>'" + log + "'\necho >>'" + log + "'\n" +
		"if [ \"$1\" = --version ]; then " + version + "; exit 0; fi\n" +
		`printf '{ "child-pid": 1 }\n{ "exit-code": 0 }\n' >&3` + "\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	testenv.Chown(t, dir)
	return bin, log
}

// fuseMirror mirrors bin's directory through bindfs mounted by uid 65534, which
// reports every file as root's and writable by root only, and returns bin there.
func fuseMirror(t *testing.T, bin string) string {
	t.Helper()
	bindfs := testenv.SetupFile(t, "/usr/bin/bindfs", "bindfs (FUSE)")
	mnt := testenv.Dir(t, "fuse-mirror")
	argv := []string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
		"--inh-caps=+sys_admin,+dac_override", "--ambient-caps=+sys_admin,+dac_override",
		bindfs, "-o", "allow_other", "--force-user=root", "--force-group=root", "--perms=go-w", filepath.Dir(bin), mnt}
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", argv, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v\n%s", mnt, err, out)
		}
	})
	return filepath.Join(mnt, filepath.Base(bin))
}

// TestRefusedThroughCLI runs `agentbox exec --backend bwrap` (and its --dry-run) as
// the unprivileged user with each binary bwrapcheck must refuse: agentbox exits 125
// with one line naming the binary and the reason, and the binary never receives a
// sandbox argument.
func TestRefusedThroughCLI(t *testing.T) {
	tests := []struct {
		name    string
		version string // fake's --version; "" for a real binary or none
		bin     string // a real binary instead of a fake
		setuid  bool
		dirMode os.FileMode // the fake's directory's mode instead of 0755
		fuse    bool        // run the fake through another user's FUSE mirror that says root owns it
		want    []string
	}{
		{name: "fake 0.8.0", version: "echo 'bubblewrap 0.8.0'",
			want: []string{"bubblewrap 0.8.0 is too old", "0.12.0 or newer", "GHSA-pxhw-h44j-8pfx"}},
		{name: "fake 0.11.2", version: "echo 'bubblewrap 0.11.2'",
			want: []string{"bubblewrap 0.11.2 is too old", "GHSA-pxhw-h44j-8pfx"}},
		{name: "garbage", version: "echo 'frobnicator 3'", want: []string{"cannot parse", "frobnicator 3"}},
		{name: "non-zero exit", version: "echo 'bubblewrap 0.12.0'; echo oops >&2; exit 4", want: []string{"--version failed", "exit status 4", "oops"}},
		{name: "setuid copy", version: "echo 'bubblewrap 0.12.0'", setuid: true, want: []string{"setuid or setgid"}},
		{name: "missing", bin: "/nonexistent/bwrap", want: []string{"/nonexistent/bwrap: not found"}},
		{name: "group-writable directory", version: "echo 'bubblewrap 0.12.0'", dirMode: 0o775,
			want: []string{"is writable by group (mode 0775)", "chmod go-w"}},
		{name: "others-writable directory", version: "echo 'bubblewrap 0.12.0'", dirMode: 0o757,
			want: []string{"is writable by others (mode 0757)", "chmod go-w"}},
		{name: "another user's FUSE mount", version: "echo 'bubblewrap 0.12.0'", fuse: true,
			want: []string{"lies on a FUSE filesystem mounted by uid 65534, not root", "--backend native"}},
		{name: "real 0.8.0", bin: realBwrap080,
			want: []string{realBwrap080, "bubblewrap 0.8.0 is too old", "0.12.0 or newer", "GHSA-pxhw-h44j-8pfx"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bin, log := tt.bin, ""
			if bin == realBwrap080 {
				testenv.SetupFile(t, bin, "bookworm's bubblewrap 0.8.0")
			}
			if tt.version != "" {
				bin, log = userFake(t, tt.version)
				if tt.setuid {
					if err := os.Chmod(bin, os.ModeSetuid|0o755); err != nil {
						t.Fatal(err)
					}
				}
				if tt.dirMode != 0 {
					if err := os.Chmod(filepath.Dir(bin), tt.dirMode); err != nil {
						t.Fatal(err)
					}
				}
				if tt.fuse {
					bin = fuseMirror(t, bin)
				}
			}
			b := sandboxtest.NewBox(t, "bwrap")
			for _, args := range [][]string{nil, {"--dry-run"}} {
				cmd := b.Command(b.Repo, args, "echo SANDBOX-RAN")
				cmd.Env = append(cmd.Env, "AGENTBOX_BWRAP="+bin)
				r := sandboxtest.Run(cmd)
				lines := strings.Split(strings.TrimSpace(r.Stderr), "\n")
				if r.Code != 125 || len(lines) != 1 || !strings.HasPrefix(lines[0], "agentbox: bwrap ") {
					t.Fatalf("%v: want exit 125 and one line from agentbox, got\n%s", args, r)
				}
				for _, w := range tt.want {
					if !strings.Contains(lines[0], w) {
						t.Errorf("%v: message %q does not say %q", args, lines[0], w)
					}
				}
				if strings.Contains(r.Stdout, "SANDBOX-RAN") || strings.Contains(r.Stdout, "--unshare") {
					t.Errorf("%v: refused bwrap still produced a sandbox or an argv:\n%s", args, r)
				}
			}
			if log == "" {
				return
			}
			data, _ := os.ReadFile(log)
			for _, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
				if line != "" && line != "--version\x1f" {
					t.Errorf("refused bwrap received %q", strings.Split(line, "\x1f"))
				}
			}
		})
	}
}

// TestDryRunThroughCLI checks `agentbox exec --backend bwrap --dry-run` with the real
// bubblewrap 0.12.0: one option per line, shell-quoted, and a shell reading the text
// gets an argv that starts with the binary and ends with the command.
func TestDryRunThroughCLI(t *testing.T) {
	b := sandboxtest.NewBox(t, "bwrap")
	bwrap := sandboxtest.BwrapPath(t)
	if bwrap == "" {
		testenv.SetupFile(t, sandboxtest.BuiltBwrap, "bubblewrap 0.12.0")
	}
	const script = "echo 'it''s here'"
	r := sandboxtest.Run(b.Command(b.Repo, []string{"--dry-run", "--offline"}, script))
	if r.Code != 0 {
		t.Fatalf("dry run: %s", r)
	}
	lines := strings.Split(strings.TrimSuffix(r.Stdout, "\n"), "\n")
	if lines[0] != bwrap+` \` {
		t.Errorf("first line %q, want the binary", lines[0])
	}
	for _, want := range []string{
		"  --unshare-net \\",
		// "/" is the stage's copy, the RAM-backed filesystems the directories of
		// the tmpfs budget (budget.go); bwrap's own /dev is made read-only.
		"  --ro-bind /dev/shm/root / \\",
		"  --dev /dev \\",
		"  --bind /dev/shm/0 /dev/shm \\",
		"  --bind /dev/shm/1 /tmp \\",
		"  --bind /dev/shm/2 /run \\",
		"  --overlay-src " + b.Home + " --overlay /dev/shm/3/upper /dev/shm/3/work " + b.Home + " \\",
		"  --remount-ro /dev \\",
		"  --chdir " + b.Repo + " \\",
		"  -- " + compat.InitPath,
		"# agentbox's init (PID 1) then runs: /bin/sh -c " + compat.Quote(script),
		compat.StageComment,
	} {
		found := false
		for _, l := range lines {
			found = found || l == want
		}
		if !found {
			t.Errorf("dry run lacks line %q:\n%s", want, r.Stdout)
		}
	}
	// Bind sources travel as descriptors opened without following symlinks; the dry
	// run names each one.
	for _, bind := range []struct{ opt, src string }{{"--bind-fd", b.Repo}, {"--ro-bind-fd", b.Repo + "/.git/hooks"}} {
		re := regexp.MustCompile(`(?m)^  ` + bind.opt + ` (\d+) ` + regexp.QuoteMeta(bind.src) + ` \\$`)
		m := re.FindStringSubmatch(r.Stdout)
		if m == nil || !strings.Contains(r.Stdout, "# fd "+m[1]+": "+bind.src+"\n") {
			t.Errorf("dry run lacks %s for %s with its source comment:\n%s", bind.opt, bind.src, r.Stdout)
		}
	}
	out, err := exec.Command("bash", "-c", "printf '%s\\0' "+lines[0]+"\n"+strings.Join(lines[1:len(lines)-1], "\n")).Output()
	if err != nil {
		t.Fatal(err)
	}
	argv := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	if argv[0] != bwrap || !reflect.DeepEqual(argv[len(argv)-2:], []string{"--", compat.InitPath}) {
		t.Errorf("shell reads the dry run as %q", argv)
	}
}
