package adversarial

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// bwrapWrapper writes dir/bwrap, a stand-in the test user runs: it logs each
// invocation's first argument to dir/calls, runs extra, then executes the real
// bubblewrap 0.12.0 with its arguments.
func bwrapWrapper(t *testing.T, dir, extra string) (bin, calls string) {
	t.Helper()
	bin, calls = filepath.Join(dir, "bwrap"), filepath.Join(dir, "calls")
	sandboxtest.WriteFile(t, bin, "#!/bin/sh\necho \"$1\" >>'"+calls+"'\n"+extra+"\nexec '"+sandboxtest.BwrapPath(t)+"' \"$@\"\n")
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	testenv.Chown(t, dir)
	return bin, calls
}

// TestBwrapSwappedAfterCheck: bwrap lies where a second session can write (~/bin
// while another session has --add-dir ~/bin, a repository), and is replaced after
// agentbox checked it and before it starts it. The stand-in replaces itself while it
// answers --version, so the swap lands in that window every time. What now lies at
// the path never runs: the launch starts the file it checked.
func TestBwrapSwappedAfterCheck(t *testing.T) {
	b := sandboxtest.NewBox(t, "bwrap")
	dir := testenv.Dir(t, "bwrap-bin")
	swap, marker := filepath.Join(dir, "bwrap.new"), filepath.Join(dir, "swapped-bwrap-ran")
	bin, calls := bwrapWrapper(t, dir, "if [ \"$1\" = --version ]; then mv '"+swap+"' '"+filepath.Join(dir, "bwrap")+"'; fi")
	sandboxtest.WriteFile(t, swap, "#!/bin/sh\necho \"$0 $*\" >>'"+marker+"'\nexit 0\n")
	if err := os.Chmod(swap, 0o755); err != nil {
		t.Fatal(err)
	}
	testenv.Chown(t, dir)

	cmd := b.Command(b.Repo, []string{"--no-record"}, "echo genuine-ran")
	cmd.Env = append(cmd.Env, "AGENTBOX_BWRAP="+bin)
	r := sandboxtest.Run(cmd)
	if ran := sandboxtest.ReadFileOr(marker); ran != "" {
		t.Errorf("the bwrap swapped in after the check ran:\n%s\nlaunch: %s", ran, r)
	}
	if sandboxtest.Exists(swap) {
		t.Fatalf("the stand-in did not replace itself: %s", r)
	}
	if r.Code != 0 || !strings.Contains(r.Stdout, "genuine-ran") {
		t.Errorf("the launch did not run the command through the checked bwrap: %s", r)
	}
	if got := sandboxtest.ReadFileOr(calls); got != "--version\n--json-status-fd\n" {
		t.Errorf("the checked bwrap ran as %q, want --version, then the launch", got)
	}
}

// TestBwrapInSharedDirRefused: a bwrap whose directory others can write (a group's,
// everyone's without the sticky bit) could be replaced by them at any time: the
// launch is refused with exit 125 and one line naming the directory and the fix,
// before anything of it runs, not even --version.
func TestBwrapInSharedDirRefused(t *testing.T) {
	for _, c := range []struct {
		name string
		mode os.FileMode
		want string
	}{
		{"group-writable", 0o775, "is writable by group (mode 0775)"},
		{"others-writable", 0o757, "is writable by others (mode 0757)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := sandboxtest.NewBox(t, "bwrap")
			dir := testenv.Dir(t, "bwrap-shared")
			bin, calls := bwrapWrapper(t, dir, "")
			if err := os.Chmod(dir, c.mode); err != nil {
				t.Fatal(err)
			}
			for _, args := range [][]string{{"--no-record"}, {"--dry-run"}} {
				cmd := b.Command(b.Repo, args, "echo SANDBOX-RAN")
				cmd.Env = append(cmd.Env, "AGENTBOX_BWRAP="+bin)
				r := sandboxtest.Run(cmd)
				lines := strings.Split(strings.TrimSpace(r.Stderr), "\n")
				if r.Code != 125 || len(lines) != 1 || !strings.HasPrefix(lines[0], "agentbox: bwrap ") ||
					!strings.Contains(lines[0], c.want) || !strings.Contains(lines[0], dir) || !strings.Contains(lines[0], "chmod go-w") {
					t.Errorf("%v: want exit 125 and one line naming %s and saying %q: %s", args, dir, c.want, r)
				}
				if strings.Contains(r.Stdout, "SANDBOX-RAN") {
					t.Errorf("%v: the command ran: %s", args, r)
				}
			}
			if got := sandboxtest.ReadFileOr(calls); got != "" {
				t.Errorf("the refused bwrap ran: %q", got)
			}
		})
	}
}
