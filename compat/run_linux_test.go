package compat

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/backend"
	"github.com/agentbox/agentbox/bwrapcheck"
	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/nsinit"
)

// fakeBwrap writes a bwrap stand-in into dir: "--version" prints version; any other
// invocation runs body. Every invocation first appends its arguments to the returned
// log, each followed by \x1f, one line per invocation.
func fakeBwrap(t *testing.T, dir, version, body string) (bin, log string) {
	t.Helper()
	bin, log = filepath.Join(dir, "bwrap"), filepath.Join(dir, "argv.log")
	script := `#!/bin/sh
printf '%s\037' "$@" >>'` + log + `'
echo >>'` + log + `'
if [ "$1" = --version ]; then
	` + version + `
	exit 0
fi
` + body + "\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, log
}

// calls returns the argv of each invocation of a fake.
func calls(t *testing.T, log string) [][]string {
	t.Helper()
	b, err := os.ReadFile(log)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out [][]string
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		out = append(out, strings.Split(strings.TrimSuffix(line, "\x1f"), "\x1f"))
	}
	return out
}

// onlyVersion fails unless every invocation of the fake was "--version": no sandbox
// argument ever reached it.
func onlyVersion(t *testing.T, log string, want int) {
	t.Helper()
	c := calls(t, log)
	if len(c) != want {
		t.Errorf("fake ran %d times (%q), want %d", len(c), c, want)
	}
	for _, args := range c {
		if !reflect.DeepEqual(args, []string{"--version"}) {
			t.Errorf("fake received %q: sandbox arguments reached a refused bwrap", args)
		}
	}
}

func testPlan() mounts.Plan {
	return mounts.Plan{
		Ops: []mounts.Op{
			{Kind: mounts.BindRO, Source: "/", Dest: "/"},
			{Kind: mounts.Tmpfs, Dest: "/tmp", Mode: 0o1777},
		},
		Workdir: "/", Command: []string{"/bin/sh", "-c", "exit 7"},
	}
}

// runFake runs plan through Run with the fake as AGENTBOX_BWRAP and returns the
// result, what bwrap wrote on stderr, and Run's error.
func runFake(t *testing.T, bin string, plan mounts.Plan) (backend.Result, string, error) {
	t.Helper()
	t.Setenv(bwrapcheck.EnvVar, bin)
	dir := t.TempDir()
	stdin, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	stdout, err := os.Create(filepath.Join(dir, "stdout"))
	if err != nil {
		t.Fatal(err)
	}
	defer stdout.Close()
	stderr, err := os.Create(filepath.Join(dir, "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	res, runErr := Run(plan, backend.Stdio{Stdin: stdin, Stdout: stdout, Stderr: stderr}, nil, nil)
	b, _ := os.ReadFile(stderr.Name())
	return res, string(b), runErr
}

const v012 = "echo 'bubblewrap 0.12.0'"

// TestRunSetupFailures checks that whenever bwrap ends without agentbox's init having
// started the command, Run fails (agentbox exits 125) and says so, and that bwrap was
// called with --version and then InitCommand's argv. The command's own statuses are
// checked with the real bubblewrap by the behaviour table (test/behaviour).
func TestRunSetupFailures(t *testing.T) {
	const started = `printf '{ "child-pid": %d, "mnt-namespace": 4026532177 }\n' $$ >&3` + "\n"
	tests := []struct {
		name string
		body string
		err  string // substring of the error
	}{
		{"setup failure after clone", started + `echo "bwrap: Can't bind mount /x: No such file" >&2; exit 1`, "bwrap failed before the command started (exit status 1)"},
		{"failure before clone", `echo "bwrap: No permissions to create new namespace" >&2; exit 1`, "bwrap failed before the command started"},
		{"exec failure", started + `echo "bwrap: execvp x: No such file or directory" >&2; exit 1`, "before the command started"},
		{"bwrap killed during setup", `kill -KILL $$`, "before the command started (exit status 137)"},
		{"exit without the init", started + `printf '{ "exit-code": 0 }\n' >&3; exit 0`, "before the command started (exit status 0)"},
		{"unreadable report", `echo 'not json' >&3; exit 1`, "status descriptor"},
	}
	exe, err := selfPath()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bin, log := fakeBwrap(t, t.TempDir(), v012, tt.body)
			plan := testPlan()
			res, _, err := runFake(t, bin, plan)
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("Run = %+v, %v; want an error saying %q", res, err, tt.err)
			}
			if res.BackendVersion != "bubblewrap 0.12.0" {
				t.Errorf("Result.BackendVersion = %q", res.BackendVersion)
			}
			c := calls(t, log)
			want, _, _, _ := InitCommand(bin, plan, exe)
			if len(c) != 2 || !reflect.DeepEqual(c[1], want[1:]) {
				t.Errorf("fake calls %q, want --version then %q", c, want[1:])
			}
		})
	}
}

// TestRunRefused checks that no sandbox argument reaches a bwrap that bwrapcheck
// refuses, and that Run fails (agentbox exits 125).
func TestRunRefused(t *testing.T) {
	tests := []struct {
		name    string
		version string
		setuid  bool
		runs    int
		err     string
	}{
		{"0.8.0", "echo 'bubblewrap 0.8.0'", false, 1, "bubblewrap 0.8.0 is too old"},
		{"0.11.2", "echo 'bubblewrap 0.11.2'", false, 1, "bubblewrap 0.11.2 is too old"},
		{"garbage", "echo 'not a bwrap'", false, 1, "cannot parse"},
		{"non-zero exit", v012 + "; exit 2", false, 1, "--version failed"},
		{"setuid copy", v012, true, 0, "setuid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The body would report a successful command: it must never run.
			bin, log := fakeBwrap(t, t.TempDir(), tt.version, `printf '{ "child-pid": 1 }\n{ "exit-code": 0 }\n' >&3`)
			if tt.setuid {
				if err := os.Chmod(bin, os.ModeSetuid|0o755); err != nil {
					t.Fatal(err)
				}
			}
			res, _, err := runFake(t, bin, testPlan())
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("Run = %+v, %v; want refused with %q", res, err, tt.err)
			}
			onlyVersion(t, log, tt.runs)
		})
	}
}

// A bind source that is not the one the launcher verified (Op.SourceID) is refused
// before bwrap starts; the verified one is opened.
func TestOpenSourcesChecksIdentity(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	id := func(p string) mounts.FileID {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		return mounts.FileID{Dev: st.Dev, Ino: st.Ino}
	}
	plan := mounts.Plan{Ops: []mounts.Op{{Kind: mounts.Bind, Source: dir, Dest: "/work", SourceID: id(other)}}}
	if files, err := openSources([]string{dir}, plan); !errors.Is(err, nsinit.ErrSourceChanged) || files != nil {
		t.Errorf("source with another identity: %v, want %v", err, nsinit.ErrSourceChanged)
	}
	plan.Ops[0].SourceID = id(dir)
	files, err := openSources([]string{dir}, plan)
	if err != nil || len(files) != 1 {
		t.Fatalf("verified source: %v", err)
	}
	files[0].Close()
}

// TestRunRetriesVanishedSocket: a masked host socket removed between the argv and
// bwrap's mount of it fails bwrap's setup (bwrap has no "try" for a destination).
// The launch is made again without it, the host work before the command running
// once; a setup failure with every socket still there is not retried.
func TestRunRetriesVanishedSocket(t *testing.T) {
	for _, vanish := range []bool{true, false} {
		t.Run(map[bool]string{true: "socket removed", false: "socket kept"}[vanish], func(t *testing.T) {
			dir := t.TempDir()
			sock := filepath.Join(dir, "daemon.sock")
			if err := os.WriteFile(sock, nil, 0o600); err != nil { // a socket as the argv sees it: a path
				t.Fatal(err)
			}
			bin, log := fakeBwrap(t, t.TempDir(), v012, `echo "bwrap: Can't create file at `+sock+`: No such file" >&2; exit 1`)
			t.Setenv(bwrapcheck.EnvVar, bin)
			plan := testPlan()
			plan.Ops = append(plan.Ops, mounts.Op{Kind: mounts.BindRO, Source: os.DevNull, Dest: sock, IfExists: true})
			befores := 0
			devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer devnull.Close()
			_, err = Run(plan, backend.Stdio{Stdin: devnull, Stdout: devnull, Stderr: devnull}, func() error {
				befores++
				if vanish {
					return os.Remove(sock)
				}
				return nil
			}, nil)
			if !errors.Is(err, errSetupFailed) {
				t.Fatalf("Run: %v, want the setup failure", err)
			}
			var launches [][]string
			for _, c := range calls(t, log) {
				if len(c) > 0 && c[0] != "--version" {
					launches = append(launches, c)
				}
			}
			want := 1
			if vanish {
				want = 2
			}
			if len(launches) != want || befores != 1 {
				t.Fatalf("%d launches and %d runs of the host work, want %d and 1", len(launches), befores, want)
			}
			if vanish && (!slices.Contains(launches[0], sock) || slices.Contains(launches[1], sock)) {
				t.Errorf("the first launch must mask %s and the second not: %q", sock, launches)
			}
		})
	}
}

// TestRunExecutesCheckedBinary: the bwrap that runs the sandbox is the file
// bwrapcheck checked, held open since, never what lies at its path when the launch
// starts it. The stand-in replaces itself at its path while it answers --version
// (as a second session that can write there could at any moment); the launch must
// still start the stand-in, with or without the tmpfs budget's stage.
func TestRunExecutesCheckedBinary(t *testing.T) {
	for _, size := range []int64{0, 8 << 20} {
		t.Run(fmt.Sprintf("tmp-size %d", size), func(t *testing.T) {
			dir := t.TempDir()
			marker, swap := filepath.Join(dir, "ran"), filepath.Join(dir, "swap")
			bin, log := fakeBwrap(t, dir, `mv '`+swap+`' "$(dirname '`+marker+`')/bwrap"; `+v012, `echo checked >>'`+marker+`'; exit 1`)
			if err := os.WriteFile(swap, []byte("#!/bin/sh\necho swapped >>'"+marker+"'\nexit 1\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			plan := testPlan()
			plan.TmpSize = size
			_, _, err := runFake(t, bin, plan)
			if !errors.Is(err, errSetupFailed) {
				t.Errorf("Run: %v, want bwrap's setup failure", err)
			}
			if _, err := os.Stat(swap); err == nil {
				t.Fatal("the stand-in did not replace itself")
			}
			if got, _ := os.ReadFile(marker); string(got) != "checked\n" {
				t.Errorf("the launch ran %q, want the checked stand-in alone (\"checked\")", got)
			}
			if c := calls(t, log); len(c) != 2 {
				t.Errorf("the checked stand-in ran %d times (%q), want --version and the launch", len(c), c)
			}
		})
	}
}
