// Package adversarial is the hardening suite: escape attempts made from inside the
// sandbox by the unprivileged test user, setup races, bad input, faults and load.
// Every test launches the real agentbox binary through internal/testkit/sandboxtest, against
// every backend, and checks the host afterwards from outside.
package adversarial

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// probeEnv, when set, makes this test binary a helper program run inside the
// sandbox: `probe NAME ARGS...` runs one probe of probe_test.go instead of the tests.
const probeEnv = "AGENTBOX_ADVERSARIAL_PROBE"

func TestMain(m *testing.M) {
	if os.Getenv(probeEnv) != "" && len(os.Args) > 1 {
		os.Exit(runProbe(os.Args[1], os.Args[2:]))
	}
	code := m.Run()
	if probeDir != "" {
		_ = os.RemoveAll(probeDir)
	}
	testenv.Cleanup()
	os.Exit(code)
}

var (
	probeOnce sync.Once
	probeDir  string
	probePath string
	probeErr  error
)

// probe returns a copy of this test binary that the test user can execute (the
// original may sit in a directory only root can enter). Run with $AGENTBOX_ADVERSARIAL_PROBE
// set, it runs one probe instead of the tests: escape attempts that need system calls
// a shell cannot make, written in Go (CGO_ENABLED=0) rather than C.
func probe(t testing.TB) string {
	t.Helper()
	probeOnce.Do(func() {
		self, err := os.Executable()
		if err != nil {
			probeErr = err
			return
		}
		if probeDir, probeErr = os.MkdirTemp("/var/tmp", "agentbox-probe-"); probeErr != nil {
			return
		}
		if probeErr = os.Chmod(probeDir, 0o755); probeErr != nil {
			return
		}
		probePath = filepath.Join(probeDir, "probe")
		probeErr = copyFile(self, probePath, 0o755)
	})
	if probeErr != nil {
		t.Fatalf("probe binary: %v", probeErr)
	}
	return probePath
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Chmod(dst, mode)
}

// target is one adversarial fixture: a box, a host directory outside the repo and
// HOME that the test user owns (so only the sandbox stands between it and a write),
// and the set of trees whose checksums must not change.
type target struct {
	*sandboxtest.Box
	Outside string // a host directory owned by the test user, outside HOME
	Victim  string // Outside/victim, a file the attacks try to change
	Bin     string // the agentbox binary the session runs
	// Pwned is a host directory where planted payloads would leave a mark when
	// something on the host runs them; the sandbox cannot write it.
	Pwned string

	skipGit bool     // leave .git/hooks and .git/config out of the snapshot
	env     []string // extra environment for the session, set by an attack's setup
	args    []string // extra agentbox exec flags, set by an attack's setup
	hostPID int      // a host process the attack tries to signal
}

func newTarget(t *testing.T, backend string) *target {
	t.Helper()
	b := sandboxtest.NewBox(t, backend)
	out := testenv.Dir(t, "outside")
	victim := filepath.Join(out, "victim")
	sandboxtest.WriteFile(t, victim, "host data\n")
	testenv.Chown(t, out)
	// A hook and a config value that the attacks try to change or add to.
	sandboxtest.WriteFile(t, filepath.Join(b.Repo, ".git/hooks/post-commit.sample"), "#!/bin/sh\n")
	testenv.Chown(t, b.Repo)
	pwned := testenv.Dir(t, "pwned")
	if err := os.Chmod(pwned, 0o777); err != nil {
		t.Fatal(err)
	}
	return &target{Box: b, Outside: out, Victim: victim, Bin: b.Bin, Pwned: pwned}
}

// protected lists the trees a session must leave as they were: the repo's Git exec
// surface, HOME except the repo's working tree, the outside directory, the binary.
func (x *target) protected() []string {
	var git []string
	if !x.skipGit {
		git = []string{filepath.Join(x.Repo, ".git/hooks"), filepath.Join(x.Repo, ".git/config")}
	}
	return append(git,
		x.Home,
		x.Outside,
		x.Bin,
	)
}

// state is a checksum per path: content, mode, owner, link target; "" when missing.
type state map[string]string

// snapshot checksums every protected tree. HOME is walked without the repo, whose
// working tree the sandbox may change, but with the repo's .git/hooks and .git/config.
func (x *target) snapshot(t *testing.T) state {
	t.Helper()
	st := state{}
	for _, root := range x.protected() {
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				st[p] = "error " + err.Error()
				return nil
			}
			switch p {
			case x.Repo, filepath.Join(x.Home, ".cache/agentbox"), filepath.Join(x.Home, ".local/state/agentbox"):
				// The working tree is the sandbox's to change; the cache and state
				// dirs are the launcher's own, written on the host.
				return filepath.SkipDir
			}
			st[p] = checksum(p)
			return nil
		})
	}
	return st
}

func checksum(p string) string {
	fi, err := os.Lstat(p)
	if err != nil {
		return "missing"
	}
	h := sha256.New()
	fmt.Fprintf(h, "%v %v ", fi.Mode(), ownerOf(fi))
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		l, _ := os.Readlink(p)
		h.Write([]byte(l))
	case fi.Mode().IsRegular():
		f, err := os.Open(p)
		if err == nil {
			_, _ = io.Copy(h, f)
			f.Close()
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// unchanged fails the test with every difference between before and now.
func (x *target) unchanged(t *testing.T, before state) {
	t.Helper()
	after := x.snapshot(t)
	var diffs []string
	for p, v := range before {
		if after[p] != v {
			diffs = append(diffs, "changed or removed: "+p)
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			diffs = append(diffs, "created: "+p)
		}
	}
	sort.Strings(diffs)
	if len(diffs) > 0 {
		t.Errorf("host changed:\n%s", strings.Join(diffs, "\n"))
	}
}
