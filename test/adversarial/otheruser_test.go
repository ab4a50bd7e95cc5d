package adversarial

import (
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// asOther runs argv as the host's other local user (testenv.OtherUser) and fails
// the test when it fails.
func asOther(t *testing.T, argv ...string) {
	t.Helper()
	if out, err := testenv.OtherCommand(t, argv[0], argv[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("as %s: %s: %v\n%s", testenv.OtherUser, strings.Join(argv, " "), err, out)
	}
}

// otherGID is the other user's primary group.
func otherGID(t *testing.T) int {
	t.Helper()
	u, err := user.Lookup(testenv.OtherUser)
	if err != nil {
		t.Fatalf("the second test user %q is missing (run scripts/setup-test-env.sh): %v", testenv.OtherUser, err)
	}
	gid, _ := strconv.Atoi(u.Gid)
	return gid
}

// refusedAsShared reports whether r is the one-line refusal of a path others can
// write, failing the test when r is some other failure.
func refusedAsShared(t *testing.T, r sandboxtest.Result, what string) bool {
	t.Helper()
	if r.Code == 0 {
		return false
	}
	if r.Code != 125 || !strings.Contains(r.Stderr, what) || !strings.Contains(r.Stderr, "can be written by") ||
		strings.Count(strings.TrimSpace(r.Stderr), "\n") != 0 {
		t.Fatalf("want one line (exit 125) refusing the %s others can write:\n%s", what, r)
	}
	return true
}

// TestStateDirOthersCanWrite: another local user who can write a directory on the
// way to the operator's state directory (~/.local/state world-writable, or ~/.local
// writable by a group the other user is in) moves the state directory aside between
// a killed session and the next launch: renaming a directory within its parent
// needs no write access to the directory itself. The next launch then found no
// pending journal and never ran the killed session's audit, and the plant stayed,
// unreported. The launch now refuses such a state directory at once (125, one
// line), as ssh refuses a ~/.ssh others can write.
func TestStateDirOthersCanWrite(t *testing.T) {
	cases := []struct {
		name  string
		share func(t *testing.T, home string) (parent string) // makes a directory the other user can write; returns it
	}{
		{"world-writable state parent", func(t *testing.T, home string) string {
			d := filepath.Join(home, ".local/state")
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
			testenv.Chown(t, filepath.Join(home, ".local"))
			if err := os.Chmod(filepath.Join(home, ".local"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(d, 0o777); err != nil {
				t.Fatal(err)
			}
			return d
		}},
		{"group-writable ~/.local of the other user's group", func(t *testing.T, home string) string {
			d := filepath.Join(home, ".local")
			if err := os.MkdirAll(filepath.Join(d, "state"), 0o755); err != nil {
				t.Fatal(err)
			}
			testenv.Chown(t, d)
			if err := os.Chown(d, int(testenv.TestUser(t).UID), otherGID(t)); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(d, 0o775); err != nil {
				t.Fatal(err)
			}
			return d
		}},
	}
	for _, backend := range sandboxtest.Backends(t) {
		for _, c := range cases {
			t.Run(backend+"/"+c.name, func(t *testing.T) {
				x := newTarget(t, backend)
				parent := c.share(t, x.Home)
				first := sandboxtest.Run(x.Command(x.Repo, []string{"--no-git-save", "--no-record"}, "true"))
				if refusedAsShared(t, first, "state directory") {
					return
				}
				plant := filepath.Join(x.Repo, ".git/refs/heads/out")
				killLauncherMidSession(t, x, "ln -s '"+x.Outside+"' .git/refs/heads/out")
				if _, err := os.Lstat(plant); err != nil {
					t.Fatalf("the session did not plant: %v", err)
				}
				state := filepath.Join(x.Home, ".local/state")
				if filepath.Base(parent) == "state" {
					asOther(t, "mv", filepath.Join(state, "agentbox"), filepath.Join(state, "moved-by-other"))
				} else {
					asOther(t, "mv", state, state+"-moved-by-other")
				}
				next := sandboxtest.Run(x.Command(x.Repo, []string{"--no-git-save", "--no-record"}, "true"))
				if _, err := os.Lstat(plant); err == nil {
					t.Errorf("another user moved the state directory aside and the killed session's plant passed unaudited:\n%s", next)
				}
			})
		}
	}
}

// TestUserConfigOthersCanWrite: another local user who can write the operator's
// config file (group-writable, in the other user's group) adds a kept path; the
// operator's next session could then write that host directory. The launch now
// refuses a config file others can write (125, one line).
func TestUserConfigOthersCanWrite(t *testing.T) {
	for _, backend := range sandboxtest.Backends(t) {
		if backend == sandboxtest.GoAPI {
			continue // the Go API reads no config file
		}
		t.Run(backend, func(t *testing.T) {
			x := newTarget(t, backend)
			notes := filepath.Join(x.Home, "notes")
			cfg := filepath.Join(x.Home, ".config/agentbox/config.toml")
			if err := os.MkdirAll(filepath.Dir(cfg), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(notes, 0o755); err != nil {
				t.Fatal(err)
			}
			sandboxtest.WriteFile(t, cfg, "hide-secrets = true\n")
			testenv.Chown(t, filepath.Join(x.Home, ".config"))
			testenv.Chown(t, notes)
			if err := os.Chown(cfg, int(testenv.TestUser(t).UID), otherGID(t)); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(cfg, 0o664); err != nil {
				t.Fatal(err)
			}
			asOther(t, "sh", "-c", `echo 'keep = ["~/notes"]' >> "$1"`, "sh", cfg)
			r := sandboxtest.Run(x.Command(x.Repo, []string{"--no-git-save", "--no-record"}, "echo planted > ~/notes/from-the-sandbox"))
			if refusedAsShared(t, r, "config file") {
				return
			}
			if sandboxtest.Exists(filepath.Join(notes, "from-the-sandbox")) {
				t.Errorf("another user's line in the operator's config made a host directory writable to the session:\n%s", r)
			}
		})
	}
}

// TestSSHAgentOfAnotherUser: SSH_AUTH_SOCK names a path below /tmp where another
// local user serves an agent of their own (the user's agent gone, the variable
// stale, the name taken). OpenSSH's ssh-agent drops clients of another user, so the
// other user relays to theirs with socat, which does not. The --ssh-agent filter
// handed the session that agent's keys and would have sent it every sign request;
// the launch now refuses it (125, one line naming who serves it).
func TestSSHAgentOfAnotherUser(t *testing.T) {
	for _, tool := range []string{"ssh-agent", "ssh-add", "ssh-keygen", "socat"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Skip(t, "%s missing (scripts/setup-test-env.sh installs openssh-client and socat)", tool)
		}
	}
	dir, err := os.MkdirTemp("/tmp", "ssh-squat-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	own, sock := filepath.Join(dir, "own.sock"), filepath.Join(dir, "agent.1234")
	for _, argv := range [][]string{{"ssh-agent", "-D", "-a", own}, {"socat", "UNIX-LISTEN:" + sock + ",mode=0777,fork", "UNIX-CONNECT:" + own}} {
		p := testenv.OtherCommand(t, argv[0], argv[1:]...)
		p.SysProcAttr.Pdeathsig = syscall.SIGKILL
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Process.Kill(); p.Wait() })
		path := own
		if argv[0] == "socat" {
			path = sock
		}
		if !sandboxtest.WaitFor(func() bool { _, err := os.Stat(path); return err == nil }) {
			t.Fatalf("the other user's %s did not start", argv[0])
		}
	}
	key := filepath.Join(dir, "k")
	asOther(t, "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "the-other-users-key", "-f", key)
	add := testenv.OtherCommand(t, "ssh-add", key)
	add.Env = append(add.Env, "SSH_AUTH_SOCK="+own)
	if out, err := add.CombinedOutput(); err != nil {
		t.Fatalf("ssh-add as %s: %v\n%s", testenv.OtherUser, err, out)
	}
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			cmd := b.Command(b.Repo, []string{"--ssh-agent", "--no-git-save", "--no-record"}, "ssh-add -l")
			cmd.Env = append(cmd.Env, "SSH_AUTH_SOCK="+sock)
			r := sandboxtest.Run(cmd)
			if strings.Contains(r.Stdout, "the-other-users-key") {
				t.Fatalf("the session was handed another user's agent:\n%s", r)
			}
			if r.Code != 125 || !strings.Contains(r.Stderr, "served by "+testenv.OtherUser) || strings.Count(strings.TrimSpace(r.Stderr), "\n") != 0 {
				t.Errorf("want one line (exit 125) naming the other user who serves the agent:\n%s", r)
			}
		})
	}
}

// TestRepoOfAnotherUser: a repository shared by a group (core.sharedRepository=group,
// its directories group-writable) is the owner's; another member of the group runs a
// session in it while a session of the owner's, killed before its audit, has left a
// plant there. That session's journal lies in the owner's state directory, which the
// member's launch cannot see: it took the tree with the plant for its baseline, the
// user's own, and its audit vouched for it. A writable session on another user's
// repository is now refused (125, one line), as Git refuses such a repository.
func TestRepoOfAnotherUser(t *testing.T) {
	x := newTarget(t, "native")
	gid := otherGID(t)
	testenv.Git(t, x.Home, x.Repo, "config", "core.sharedRepository", "group")
	err := filepath.Walk(x.Repo, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.Mode()&os.ModeSymlink != 0 {
			return err
		}
		if err := os.Lchown(p, int(testenv.TestUser(t).UID), gid); err != nil {
			return err
		}
		mode := fi.Mode().Perm() | 0o060
		if fi.IsDir() {
			mode |= os.ModeSetgid | 0o010
		}
		return os.Chmod(p, mode)
	})
	if err != nil {
		t.Fatal(err)
	}
	plant := filepath.Join(x.Repo, ".git/refs/heads/out")
	killLauncherMidSession(t, x, "ln -s '"+x.Outside+"' .git/refs/heads/out")
	if _, err := os.Lstat(plant); err != nil {
		t.Fatalf("the owner's session did not plant: %v", err)
	}
	home, err := os.MkdirTemp("/var/tmp", "agentbox-other-home-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	u, err := user.Lookup(testenv.OtherUser)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	if err := os.Chown(home, uid, gid); err != nil {
		t.Fatal(err)
	}
	cmd := testenv.OtherCommand(t, x.Bin, "exec", "--backend", "native", "--no-git-save", "--no-record", "--", "true")
	cmd.Dir = x.Repo
	cmd.Env = otherHome(cmd.Env, home)
	r := sandboxtest.Run(cmd)
	switch {
	case r.Code == 0 && !strings.Contains(r.Stderr, "refs/heads/out"):
		t.Errorf("another user's session took the owner's killed session's plant for the user's own and reported nothing:\n%s", r)
	case r.Code != 0 && (r.Code != 125 || !strings.Contains(r.Stderr, "is owned by "+testenv.TestUser(t).Name) || strings.Count(strings.TrimSpace(r.Stderr), "\n") != 0):
		t.Errorf("want one line (exit 125) naming the repository's owner:\n%s", r)
	}
	ro := testenv.OtherCommand(t, x.Bin, "exec", "--backend", "native", "--read-only", "--no-git-save", "--no-record", "--", "true")
	ro.Dir = x.Repo
	ro.Env = otherHome(ro.Env, home)
	if r := sandboxtest.Run(ro); r.Code != 0 {
		t.Errorf("a --read-only session on another user's repository: %s", r)
	}
}

// otherHome is env with HOME set to home.
func otherHome(env []string, home string) []string {
	out := []string{"HOME=" + home}
	for _, kv := range env {
		if !strings.HasPrefix(kv, "HOME=") {
			out = append(out, kv)
		}
	}
	return out
}
