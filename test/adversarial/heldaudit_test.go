package adversarial

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/nsinit"
)

// heldScript plants a nested repository whose config runs a program on the
// operator's next git status there, says so (ready), and waits until the racing
// process has moved its directory away (go, which appears in the directory the
// session works in, wherever it lies).
const heldScript = plantInWo + `touch ready
i=0; while [ ! -e go ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
rm -f ready go
`

// TestAuditFollowsMovedDir: at the session's end a racing process (a second
// session, or the session itself, with a grant of the parent) renames the
// directory the session wrote away and puts a symlink or another directory at its
// path. The audit reads the directory the session wrote, through the descriptor
// held since the launch, wherever it lies now: the plant is quarantined there,
// the audit says where the directory went, and the operator's Git run in it
// afterwards runs nothing.
func TestAuditFollowsMovedDir(t *testing.T) {
	rows := []struct {
		name   string
		addDir bool // the plant is in an --add-dir, not the repository
		decoy  string
	}{
		{"repo, symlink at its path", false, "symlink"},
		{"repo, another directory at its path", false, "dir"},
		{"--add-dir, symlink at its path", true, "symlink"},
		{"--add-dir, another directory at its path", true, "dir"},
	}
	runners := everyRunner(t)
	for _, backend := range runners {
		for _, row := range rows {
			if backend == sandboxtest.GoAPI && row.addDir {
				continue // the Go API's door takes no --add-dir
			}
			t.Run(backend+"/"+row.name, func(t *testing.T) {
				x := newTarget(t, backend)
				add := filepath.Join(x.Home, "extra")
				if err := os.Mkdir(add, 0o755); err != nil {
					t.Fatal(err)
				}
				testenv.Chown(t, add)
				dir := x.Repo
				if row.addDir {
					dir = add
				}
				args := []string{"--no-git-save", "--add-dir", add}
				if backend == sandboxtest.GoAPI {
					args = args[:1]
				}
				cmd := x.Command(x.Repo, args, `cd "$DIR" && `+heldScript)
				cmd.Env = append(cmd.Env, "PWNED="+x.Pwned, "DIR="+dir)
				ended := start(t, cmd)
				if r, ok := untilReady(filepath.Join(dir, "ready"), ended); !ok {
					_ = cmd.Process.Kill()
					t.Fatalf("the session never said it was ready:\n%s", r)
				}
				moved := dir + "-moved"
				moveAway(t, x, dir, moved, row.decoy)
				sandboxtest.WriteFile(t, filepath.Join(moved, "go"), "")
				r := <-ended
				if !strings.Contains(r.Stderr, "was moved during the session to "+moved) {
					t.Errorf("the audit did not say where the directory went:\n%s", r)
				}
				if !strings.Contains(r.Stderr, filepath.Join(moved, "wo/sub/.git/config")+" (config)") || !strings.Contains(r.Stderr, "moved to ") {
					t.Errorf("the plant in the moved directory was not reported and moved, at the path it has now:\n%s", r)
				}
				checkNoPlant(t, x, moved)
				if t.Failed() {
					t.Logf("session:\n%s", r)
				}
			})
		}
	}
}

// TestAuditFollowsDirMovedBySecondSession: the racing process is a second
// session, granted the parent of the first one's --add-dir: its sandbox renames
// the directory away and makes a clean one at its path. The first session's
// audit follows the directory, and no audit leaves the plant for the
// operator's Git.
func TestAuditFollowsDirMovedBySecondSession(t *testing.T) {
	runners := sandboxtest.Backends(t)
	if nsinit.RawInitAvailable() {
		runners = append(runners, sandboxtest.NativeGo)
	}
	for _, backend := range runners {
		t.Run(backend, func(t *testing.T) {
			x := newTarget(t, backend)
			parent := filepath.Join(x.Home, "proj")
			add := filepath.Join(parent, "extra")
			if err := os.MkdirAll(add, 0o755); err != nil {
				t.Fatal(err)
			}
			testenv.Chown(t, parent)
			first := x.Command(x.Repo, []string{"--no-git-save", "--add-dir", add}, `cd "$DIR" && `+heldScript)
			first.Env = append(first.Env, "PWNED="+x.Pwned, "DIR="+add)
			ended := start(t, first)
			if r, ok := untilReady(filepath.Join(add, "ready"), ended); !ok {
				_ = first.Process.Kill()
				t.Fatalf("the session never said it was ready:\n%s", r)
			}
			second := x.Command(x.Repo, []string{"--no-git-save", "--add-dir", parent},
				`mv "$P/extra" "$P/extra-moved" && mkdir "$P/extra" && touch "$P/extra-moved/go"`)
			second.Env = append(second.Env, "P="+parent)
			r2 := sandboxtest.Run(second)
			r := <-ended
			moved := add + "-moved"
			if r2.Code != 0 || !strings.Contains(r.Stderr, "was moved during the session to "+moved) {
				t.Errorf("the first session's audit did not follow its directory:\nfirst: %s\nsecond: %s", r, r2)
			}
			checkNoPlant(t, x, moved)
			if t.Failed() {
				t.Logf("first: %s\nsecond: %s", r, r2)
			}
		})
	}
}

// start starts a session; its result arrives on the channel when it ends.
func start(t *testing.T, cmd *exec.Cmd) <-chan sandboxtest.Result {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ended := make(chan sandboxtest.Result, 1)
	go func() { ended <- resultOfWait(cmd, &out, &errb) }()
	return ended
}

// everyRunner lists the backends, the Go init where the raw init is the native
// backend's (with no raw init, native runs the Go init already) and the Go API.
func everyRunner(t *testing.T) []string {
	runners := sandboxtest.Backends(t)
	if nsinit.RawInitAvailable() {
		runners = append(runners, sandboxtest.NativeGo)
	}
	return append(runners, sandboxtest.GoAPI)
}

// holdSession starts cmd, a session that writes ready once it holds what it
// took and then waits for its standard input to close, and waits until it is
// ready; when the session ends or times out first the test fails with what it
// was to do. release closes the session's input and returns its result; a session
// still held is released at the test's end.
func holdSession(t *testing.T, cmd *exec.Cmd, ready, what string) (release func() sandboxtest.Result) {
	t.Helper()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	ended := start(t, cmd)
	var once sync.Once
	var r sandboxtest.Result
	release = func() sandboxtest.Result {
		once.Do(func() { stdin.Close(); r = <-ended })
		return r
	}
	t.Cleanup(func() { release() })
	if got, ok := untilReady(ready, ended); !ok {
		if got.Code != -1 || got.Stderr != "timed out" { // ended: nothing left to wait for
			once.Do(func() { stdin.Close(); r = got })
		}
		t.Fatalf("the session never %s:\n%s", what, got)
	}
	return release
}

// untilReady waits, at most a minute, until path exists (ok) or the session
// ended (its result).
func untilReady(path string, ended <-chan sandboxtest.Result) (sandboxtest.Result, bool) {
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		select {
		case r := <-ended:
			return r, false
		default:
		}
		if sandboxtest.Exists(path) {
			return sandboxtest.Result{}, true
		}
	}
	return sandboxtest.Result{Code: -1, Stderr: "timed out"}, false
}

// moveAway renames dir to moved, as a process of the user that can write the
// parent, and puts a decoy at dir: a symlink to a clean directory, or a clean
// directory.
func moveAway(t *testing.T, x *target, dir, moved, decoy string) {
	t.Helper()
	if err := os.Rename(dir, moved); err != nil {
		t.Fatal(err)
	}
	clean := dir + "-clean"
	if err := os.Mkdir(clean, 0o755); err != nil {
		t.Fatal(err)
	}
	testenv.Chown(t, clean)
	switch decoy {
	case "symlink":
		mustSymlink(t, clean, dir)
	default:
		if err := os.Rename(clean, dir); err != nil {
			t.Fatal(err)
		}
	}
}

// resultOfWait waits for a started command and maps how it ended, as
// sandboxtest.Run does.
func resultOfWait(cmd interface{ Wait() error }, out, errb *bytes.Buffer) sandboxtest.Result {
	err := cmd.Wait()
	code := 0
	if ee, ok := err.(interface{ ExitCode() int }); ok {
		code = ee.ExitCode()
	} else if err != nil {
		code = -1
		errb.WriteString(err.Error())
	}
	return sandboxtest.Result{Stdout: out.String(), Stderr: errb.String(), Code: code}
}
