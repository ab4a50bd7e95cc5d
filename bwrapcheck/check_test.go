package bwrapcheck

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/grantledger"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// The real binaries scripts/setup-test-env.sh provides.
const (
	realBwrap012 = "/var/cache/agentbox-test/bwrap-0.12.0/bin/bwrap"
	realBwrap080 = "/var/cache/agentbox-test/bwrap-0.8.0/usr/bin/bwrap"
)

// fake writes an executable shell script named bwrap into a fresh directory. Every
// invocation appends its arguments, each in brackets, as one line to the returned
// log file, before body runs.
func fake(t *testing.T, body string) (bin, log string) {
	t.Helper()
	dir := t.TempDir()
	bin, log = filepath.Join(dir, "bwrap"), filepath.Join(dir, "argv.log")
	script := "#!/bin/sh\nprintf '[%s]' \"$@\" >>'" + log + "'\necho >>'" + log + "'\n" + body + "\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, log
}

// invocations returns one line per run of the fake.
func invocations(t *testing.T, log string) []string {
	t.Helper()
	b, err := os.ReadFile(log)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

func TestCheckFakes(t *testing.T) {
	const v012 = "echo 'bubblewrap 0.12.0'"
	tests := []struct {
		name  string
		body  string
		mode  os.FileMode // 0: 0755
		runs  int         // how many times the fake must have run (--version only)
		want  string      // accepted version; "" when refused
		error []string    // substrings of the refusal
		hangs bool        // the fake never finishes: Check's timeout is what ends it
	}{
		{name: "0.8.0", body: "echo 'bubblewrap 0.8.0'", runs: 1,
			error: []string{"bubblewrap 0.8.0 is too old", "0.12.0 or newer", "GHSA-pxhw-h44j-8pfx"}},
		{name: "0.11.2", body: "echo 'bubblewrap 0.11.2'", runs: 1,
			error: []string{"bubblewrap 0.11.2 is too old", "0.12.0 or newer", "GHSA-pxhw-h44j-8pfx"}},
		{name: "0.12.0-rc1", body: "echo 'bubblewrap 0.12.0-rc1'", runs: 1,
			error: []string{"bubblewrap 0.12.0-rc1 is too old", "GHSA-pxhw-h44j-8pfx"}},
		{name: "0.12.0", body: v012, runs: 1, want: "0.12.0"},
		{name: "0.13.1", body: "echo 'bubblewrap 0.13.1'", runs: 1, want: "0.13.1"},
		{name: "0.13.1-rc1", body: "echo 'bubblewrap 0.13.1-rc1'", runs: 1, want: "0.13.1-rc1"},
		{name: "1.0.0", body: "echo 'bubblewrap 1.0.0'", runs: 1, want: "1.0.0"},
		{name: "distro", body: "echo 'bubblewrap 0.12.0-1ubuntu2 (Ubuntu)'", runs: 1, want: "0.12.0-1ubuntu2"},
		{name: "garbage", body: "echo 'Usage: frobnicate [OPTION]'", runs: 1,
			error: []string{"cannot parse its --version output", "frobnicate"}},
		{name: "empty output", body: "true", runs: 1, error: []string{"cannot parse its --version output"}},
		{name: "non-zero exit", body: v012 + "\necho 'bwrap: cannot frob' >&2\nexit 3", runs: 1,
			error: []string{"--version failed", "exit status 3", "cannot frob"}},
		{name: "killed by signal", body: v012 + "\nkill -KILL $$", runs: 1, error: []string{"--version failed", "killed"}},
		{name: "hangs", body: "exec sleep 30", runs: 1, hangs: true, error: []string{"--version did not finish within 300ms"}},
		// A grandchild keeps stdout open after the fake is killed.
		{name: "hangs with child", body: "sleep 5 &\nwait", runs: 1, hangs: true, error: []string{"--version did not finish"}},
		{name: "setuid copy", body: v012, mode: os.ModeSetuid | 0o755, error: []string{"setuid or setgid"}},
		{name: "setgid copy", body: v012, mode: os.ModeSetgid | 0o755, error: []string{"setuid or setgid"}},
		{name: "not executable", body: v012, mode: 0o644, error: []string{"not executable"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bin, log := fake(t, tt.body)
			if tt.mode != 0 {
				if err := os.Chmod(bin, tt.mode); err != nil {
					t.Fatal(err)
				}
				if fi, err := os.Stat(bin); err != nil || fi.Mode() != tt.mode {
					t.Fatalf("fake has mode %v, want %v (%v)", fi.Mode(), tt.mode, err)
				}
			}
			// A loaded machine can take seconds to start a shell: only the fakes
			// that hang get the short timeout.
			timeout := 10 * time.Second
			if tt.hangs {
				timeout = 300 * time.Millisecond
			}
			got, err := Check(bin, timeout)
			if tt.want != "" {
				if err != nil {
					t.Fatalf("Check refused %s: %v", tt.name, err)
				}
				if got.Version.String() != tt.want || got.Path != bin {
					t.Errorf("Check = %+v, want version %s at %s", got, tt.want, bin)
				}
			} else {
				if err == nil {
					t.Fatalf("Check accepted %s as %s", tt.name, got.Version)
				}
				var e *Error
				if !errors.As(err, &e) || e.Path != bin {
					t.Errorf("error %v is not an *Error naming %s", err, bin)
				}
				for _, s := range tt.error {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not say %q", err, s)
					}
				}
				if strings.Contains(err.Error(), "\n") {
					t.Errorf("error %q is not one line", err)
				}
			}
			runs := invocations(t, log)
			if len(runs) != tt.runs {
				t.Errorf("fake ran %d times (%q), want %d", len(runs), runs, tt.runs)
			}
			for _, r := range runs {
				if r != "[--version]" {
					t.Errorf("fake received arguments %s, want only [--version]", r)
				}
			}
		})
	}
}

func TestCheckMissing(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "bwrap")
	_, err := Check(bin, time.Second)
	if err == nil || !strings.Contains(err.Error(), bin+": not found") || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Check(missing) = %v, want a not-found refusal naming %s", err, bin)
	}
	_, err = Check(filepath.Dir(bin), time.Second)
	if err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("Check(directory) = %v, want a refusal", err)
	}
}

func TestFind(t *testing.T) {
	bin, _ := fake(t, "echo 'bubblewrap 0.12.0'")

	t.Setenv(EnvVar, bin)
	t.Setenv("PATH", "/nonexistent")
	if got, err := Find(); err != nil || got != bin {
		t.Errorf("Find with %s=%s = %q, %v", EnvVar, bin, got, err)
	}

	if _, err := Find(filepath.Dir(bin)); err == nil || !strings.Contains(err.Error(), "which a session can write") {
		t.Errorf("Find with %s inside a writable dir = %v, want a refusal", EnvVar, err)
	}

	t.Setenv(EnvVar, "bin/bwrap")
	if _, err := Find(); err == nil || !strings.Contains(err.Error(), "must be an absolute path") {
		t.Errorf("Find with a relative %s = %v, want a refusal", EnvVar, err)
	}

	t.Setenv(EnvVar, "")
	t.Setenv("PATH", "/nonexistent:"+filepath.Dir(bin))
	if got, err := Find(); err != nil || got != bin {
		t.Errorf("Find on PATH = %q, %v, want %s", got, err, bin)
	}

	// A bwrap the sandbox could have written is never the one found.
	if _, err := Find(filepath.Dir(bin)); err == nil || !strings.Contains(err.Error(), "which the sandbox can write") {
		t.Errorf("Find with bwrap in a writable dir = %v, want it skipped", err)
	}

	t.Setenv("PATH", "/nonexistent")
	if _, err := Find(); err == nil || !strings.Contains(err.Error(), "not found on PATH") || !strings.Contains(err.Error(), EnvVar) {
		t.Errorf("Find with no bwrap = %v, want a refusal naming PATH and %s", err, EnvVar)
	}

	// A directory an earlier session was given writable counts as this one's, for
	// AGENTBOX_BWRAP and on PATH.
	state := t.TempDir()
	t.Setenv("XDG_STATE_HOME", state)
	if err := grantledger.Record(grantledger.StateDir(state, ""), []string{filepath.Dir(bin)}); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvVar, bin)
	if _, err := Find(); err == nil || !strings.Contains(err.Error(), "which a session can write") {
		t.Errorf("Find with %s in an earlier session's directory = %v, want a refusal", EnvVar, err)
	}
	t.Setenv(EnvVar, "")
	t.Setenv("PATH", filepath.Dir(bin))
	if got, err := Find(); err == nil || !strings.Contains(err.Error(), "an earlier session was given writable") {
		t.Errorf("Find on PATH in an earlier session's directory = %q, %v, want it skipped", got, err)
	}

	// The same directory renamed: its identity is listed too.
	renamed := filepath.Dir(bin) + "-renamed"
	if err := os.Rename(filepath.Dir(bin), renamed); err != nil {
		t.Fatal(err)
	}
	defer os.Rename(renamed, filepath.Dir(bin))
	moved := filepath.Join(renamed, filepath.Base(bin))
	t.Setenv(EnvVar, moved)
	if _, err := Find(); err == nil || !strings.Contains(err.Error(), "by that or another name") {
		t.Errorf("Find with %s in an earlier session's directory renamed = %v, want a refusal", EnvVar, err)
	}
	t.Setenv(EnvVar, "")
	t.Setenv("PATH", renamed)
	if got, err := Find(); err == nil || !strings.Contains(err.Error(), "under another name now") {
		t.Errorf("Find on PATH in an earlier session's directory renamed = %q, %v, want it skipped", got, err)
	}

	// The session's link there to a program of the host's choosing (here another
	// bwrap outside every grant): the link is what a session could replace.
	elsewhere, _ := fake(t, "echo 'bubblewrap 0.12.0'")
	if err := os.Remove(moved); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, moved); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvVar, moved)
	if got, err := Find(); err == nil || !strings.Contains(err.Error(), "by that or another name") {
		t.Errorf("Find with %s a link in an earlier session's directory renamed = %q, %v, want a refusal", EnvVar, got, err)
	}
	t.Setenv(EnvVar, "")
	if got, err := Find(); err == nil || !strings.Contains(err.Error(), "under another name now") {
		t.Errorf("Find on PATH with a link in an earlier session's directory renamed = %q, %v, want it skipped", got, err)
	}
}

func TestLookup(t *testing.T) {
	old, oldLog := fake(t, "echo 'bubblewrap 0.8.0'")
	t.Setenv(EnvVar, old)
	if _, err := Lookup(); err == nil || !strings.Contains(err.Error(), "0.8.0 is too old") {
		t.Errorf("Lookup(0.8.0) = %v, want refused", err)
	}
	if runs := invocations(t, oldLog); len(runs) != 1 || runs[0] != "[--version]" {
		t.Errorf("fake 0.8.0 received %q, want only [--version]", runs)
	}

	good, _ := fake(t, "echo 'bubblewrap 0.13.1'")
	t.Setenv(EnvVar, good)
	if b, err := Lookup(); err != nil || b.Path != good || b.Version.String() != "0.13.1" {
		t.Errorf("Lookup(0.13.1) = %+v, %v", b, err)
	}
}

// TestRealBinaries checks the real releases scripts/setup-test-env.sh provides: Debian
// bookworm's 0.8.0 is refused, 0.12.0 built from source is accepted.
func TestRealBinaries(t *testing.T) {
	testenv.SetupFile(t, realBwrap012, "bubblewrap 0.12.0")
	testenv.SetupFile(t, realBwrap080, "bookworm's bubblewrap 0.8.0")
	_, err := Check(realBwrap080, DefaultTimeout)
	if err == nil || !strings.Contains(err.Error(), "bubblewrap 0.8.0 is too old") || !strings.Contains(err.Error(), Advisory) {
		t.Errorf("Check(real 0.8.0) = %v, want refused naming 0.8.0 and %s", err, Advisory)
	}
	b, err := Check(realBwrap012, DefaultTimeout)
	if err != nil || b.Version != (Version{0, 12, 0, ""}) {
		t.Errorf("Check(real 0.12.0) = %+v, %v, want accepted", b, err)
	}
}

// TestCheckTrust: the file Check runs, every directory it is looked up in and every
// link on the way must be owned by root or the launching user, and writable by no
// one else (a sticky directory excepted, where only an entry's owner may replace
// it): anyone else who can write one of them could put another bwrap there.
func TestCheckTrust(t *testing.T) {
	const v012 = "echo 'bubblewrap 0.12.0'"
	const nobody = 65534
	tests := []struct {
		name  string
		setup func(t *testing.T, bin string) string // returns the path to check
		want  string                                // substring of the refusal; "" accepted
	}{
		{"owner-only directory", func(t *testing.T, bin string) string { return bin }, ""},
		{"group-writable directory", func(t *testing.T, bin string) string {
			chmod(t, filepath.Dir(bin), 0o775)
			return bin
		}, "is writable by group (mode 0775)"},
		{"others-writable directory", func(t *testing.T, bin string) string {
			chmod(t, filepath.Dir(bin), 0o757)
			return bin
		}, "is writable by others (mode 0757)"},
		{"sticky shared directory", func(t *testing.T, bin string) string {
			chmod(t, filepath.Dir(bin), os.ModeSticky|0o777)
			return bin
		}, ""},
		{"group-writable ancestor", func(t *testing.T, bin string) string {
			chmod(t, filepath.Dir(filepath.Dir(bin)), 0o770)
			return bin
		}, "is writable by group"},
		{"group-writable file", func(t *testing.T, bin string) string {
			chmod(t, bin, 0o775)
			return bin
		}, "is writable by others than its owner"},
		{"file of another user", func(t *testing.T, bin string) string {
			chown(t, bin, nobody)
			return bin
		}, "is owned by uid 65534"},
		{"directory of another user", func(t *testing.T, bin string) string {
			chown(t, filepath.Dir(bin), nobody)
			return bin
		}, "is owned by uid 65534"},
		{"link from a trusted directory", func(t *testing.T, bin string) string {
			return link(t, bin, 0o755)
		}, ""},
		{"link in an others-writable directory", func(t *testing.T, bin string) string {
			return link(t, bin, 0o757)
		}, "is writable by others"},
		{"link of another user in a sticky directory", func(t *testing.T, bin string) string {
			l := link(t, bin, os.ModeSticky|0o777)
			if err := os.Lchown(l, nobody, nobody); err != nil {
				t.Fatal(err)
			}
			return l
		}, "is owned by uid 65534"},
		{"relative link with ..", func(t *testing.T, bin string) string {
			dir := filepath.Join(filepath.Dir(filepath.Dir(bin)), "rel")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			l := filepath.Join(dir, "bwrap")
			if err := os.Symlink(filepath.Join("..", filepath.Base(filepath.Dir(bin)), "bwrap"), l); err != nil {
				t.Fatal(err)
			}
			return l
		}, ""},
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: the rows chown to another user") // never under the test command, which runs as root
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bin, log := fake(t, v012)
			// fake's directory is t.TempDir()'s: one level more, owned by root, 0755.
			chmod(t, filepath.Dir(bin), 0o755)
			chmod(t, filepath.Dir(filepath.Dir(bin)), 0o755)
			p := tt.setup(t, bin)
			b, err := Check(p, 10*time.Second)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Check(%s) refused: %v", p, err)
				}
				b.Close()
				return
			}
			b.Close()
			if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("Check(%s) = %v; want one line saying %q", p, err, tt.want)
			}
			if runs := invocations(t, log); len(runs) != 0 {
				t.Errorf("an untrusted bwrap ran: %q", runs)
			}
		})
	}
}

// TestCheckHoldsTheCheckedFile: a bwrap whose --version replaces the file at its own
// path (as a second session that can write there could, at any moment) leaves Check
// holding the file it ran, and that is what runs through ExecPath.
func TestCheckHoldsTheCheckedFile(t *testing.T) {
	bin, _ := fake(t, `if [ "$1" = --version ]; then mv "$(dirname '`+"X"+`')/swap" '`+"X"+`'; echo 'bubblewrap 0.12.0'; exit 0; fi; echo checked`)
	// The fake names itself: rewrite its placeholder with its own path.
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, []byte(strings.ReplaceAll(string(data), "'X'", "'"+bin+"'")), 0o755); err != nil {
		t.Fatal(err)
	}
	swap := filepath.Join(filepath.Dir(bin), "swap")
	if err := os.WriteFile(swap, []byte("#!/bin/sh\necho swapped\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := Check(bin, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := os.Stat(swap); err == nil {
		t.Fatal("the fake did not swap itself")
	}
	cmd := exec.Command(ExecPath(3), "run")
	cmd.ExtraFiles = []*os.File{b.File}
	out, err := cmd.Output()
	if err != nil || string(out) != "checked\n" {
		t.Errorf("the held file ran as %q, %v; want the checked file's \"checked\"", out, err)
	}
}

func chmod(t *testing.T, p string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func chown(t *testing.T, p string, uid int) {
	t.Helper()
	if err := os.Lchown(p, uid, uid); err != nil {
		t.Fatal(err)
	}
}

// link makes a directory with mode beside bin's, holding a link named bwrap to bin,
// and returns the link's path.
func link(t *testing.T, bin string, mode os.FileMode) string {
	t.Helper()
	dir := filepath.Join(filepath.Dir(filepath.Dir(bin)), "links")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	chmod(t, dir, mode)
	l := filepath.Join(dir, "bwrap")
	if err := os.Symlink(bin, l); err != nil {
		t.Fatal(err)
	}
	return l
}
