package adversarial

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// badInput is one invocation agentbox must refuse before anything runs.
type badInput struct {
	name  string
	setup func(t *testing.T, b *sandboxtest.Box) // host preparation (as root or the user)
	args  func(b *sandboxtest.Box) []string      // the whole argv after "agentbox"
	dir   func(b *sandboxtest.Box) string        // working directory; default the repo
	env   []string                               // extra environment
	envOf func(b *sandboxtest.Box) []string      // extra environment that depends on the box
	says  string                                 // the refusal must contain this (the true reason)
	codes []int                                  // accepted exit statuses; default 125
	// works: a launch is also acceptable, provided the command's write landed in
	// this directory (the intended repository) — a legal but odd input.
	works func(b *sandboxtest.Box) string
	usage bool // the usage text (several lines) is the right answer
}

func theRepo(b *sandboxtest.Box) string { return b.Repo }

func inHome(name string) func(b *sandboxtest.Box) string {
	return func(b *sandboxtest.Box) string { return filepath.Join(b.Home, name) }
}

func execArgs(b *sandboxtest.Box, flags ...string) []string {
	return append(append([]string{"exec", "--backend", b.Backend, "--no-git-save", "--no-record"}, flags...),
		"--", "/bin/sh", "-c", `echo RAN; touch ran`)
}

// recordedExecArgs is execArgs without --no-record: what the record would warn
// about comes before the refusal under test.
func recordedExecArgs(b *sandboxtest.Box) []string {
	return []string{"exec", "--backend", b.Backend, "--no-git-save", "--", "/bin/sh", "-c", `echo RAN; touch ran`}
}

func repoArg(path func(b *sandboxtest.Box) string) func(b *sandboxtest.Box) []string {
	return func(b *sandboxtest.Box) []string { return execArgs(b, "--repo", path(b)) }
}

var longName = strings.Repeat("x", 255)

var badInputs = []badInput{
	{name: "empty --repo", args: func(b *sandboxtest.Box) []string { return execArgs(b, "--repo", "") }, works: theRepo},
	{name: "relative --repo that does not exist", args: repoArg(func(*sandboxtest.Box) string { return "no/such/dir" })},
	{name: "relative --repo", args: repoArg(func(*sandboxtest.Box) string { return "repo" }),
		dir: func(b *sandboxtest.Box) string { return b.Home }, works: theRepo},
	{name: "..-laden --repo up to the root", args: repoArg(func(*sandboxtest.Box) string { return strings.Repeat("../", 40) })},
	{name: "..-laden --repo up to HOME's parent", args: repoArg(func(b *sandboxtest.Box) string { return b.Repo + "/../.." })},
	{name: "..-laden --repo back to the repo", args: repoArg(func(b *sandboxtest.Box) string { return b.Repo + "/../repo/./../repo/" }), works: theRepo},
	{name: "..-laden --repo through a missing dir", args: repoArg(func(b *sandboxtest.Box) string { return b.Repo + "/missing/../" })},
	{name: "non-UTF-8 --repo that does not exist", args: repoArg(func(b *sandboxtest.Box) string { return b.Home + "/\xff\xfe\x80" })},
	{name: "non-UTF-8 --repo that exists", setup: func(t *testing.T, b *sandboxtest.Box) {
		mkUserDir(t, filepath.Join(b.Home, "r\xff\xfe"))
	}, args: repoArg(func(b *sandboxtest.Box) string { return b.Home + "/r\xff\xfe" }), works: inHome("r\xff\xfe")},
	{name: "control characters in --repo", setup: func(t *testing.T, b *sandboxtest.Box) {
		mkUserDir(t, filepath.Join(b.Home, "a\nb\x1b[31m"))
	}, args: repoArg(func(b *sandboxtest.Box) string { return b.Home + "/a\nb\x1b[31m" }), works: inHome("a\nb\x1b[31m")},
	{name: "--repo longer than PATH_MAX", args: repoArg(func(b *sandboxtest.Box) string { return b.Home + strings.Repeat("/"+longName, 20) })},
	{name: "--repo component longer than NAME_MAX", args: repoArg(func(b *sandboxtest.Box) string { return b.Home + "/" + strings.Repeat("y", 300) })},
	{name: "--repo that exists deeper than PATH_MAX", setup: func(t *testing.T, b *sandboxtest.Box) {
		deepDir(t, b.Home, 20)
	}, args: repoArg(func(b *sandboxtest.Box) string { return b.Home + strings.Repeat("/"+longName, 20) })},
	{name: "--repo that is a file", args: repoArg(func(b *sandboxtest.Box) string { return b.Repo + "/README" })},
	{name: "--repo that is a FIFO", setup: func(t *testing.T, b *sandboxtest.Box) {
		if err := syscall.Mkfifo(filepath.Join(b.Home, "fifo"), 0o644); err != nil {
			t.Fatal(err)
		}
		testenv.Chown(t, filepath.Join(b.Home, "fifo"))
	}, args: repoArg(func(b *sandboxtest.Box) string { return b.Home + "/fifo" })},
	{name: "--repo that is a dangling symlink", setup: func(t *testing.T, b *sandboxtest.Box) {
		mustSymlink(t, "/nonexistent/agentbox", filepath.Join(b.Home, "dangling"))
	}, args: repoArg(func(b *sandboxtest.Box) string { return b.Home + "/dangling" })},
	{name: "--repo that is a symlink loop", setup: func(t *testing.T, b *sandboxtest.Box) {
		mustSymlink(t, "loop2", filepath.Join(b.Home, "loop1"))
		mustSymlink(t, "loop1", filepath.Join(b.Home, "loop2"))
	}, args: repoArg(func(b *sandboxtest.Box) string { return b.Home + "/loop1" })},
	{name: "--repo without permission", setup: func(t *testing.T, b *sandboxtest.Box) {
		locked := filepath.Join(b.Home, "locked")
		mkUserDir(t, filepath.Join(locked, "repo"))
		if err := os.Chmod(locked, 0); err != nil {
			t.Fatal(err)
		}
	}, args: repoArg(func(b *sandboxtest.Box) string { return b.Home + "/locked/repo" })},
	{name: "--repo that is a device", args: repoArg(func(*sandboxtest.Box) string { return "/dev/null" })},
	{name: "--repo in sys", args: repoArg(func(*sandboxtest.Box) string { return "/sys/kernel" })},
	{name: "unknown flag", args: func(b *sandboxtest.Box) []string { return execArgs(b, "--no-such-flag") }},
	{name: "unknown backend", args: func(b *sandboxtest.Box) []string {
		return []string{"exec", "--backend", "docker\xff", "--", "true"}
	}},
	{name: "unknown subcommand", args: func(*sandboxtest.Box) []string { return []string{"exex\xff"} }},
	{name: "no subcommand", args: func(*sandboxtest.Box) []string { return nil }, usage: true},
	{name: "negative --git-save-keep", args: func(b *sandboxtest.Box) []string {
		return []string{"exec", "--backend", b.Backend, "--git-save-keep", "-1", "--", "true"}
	}},
	{name: "missing command", args: func(b *sandboxtest.Box) []string {
		return []string{"exec", "--backend", b.Backend, "--no-git-save", "--no-record", "--", "agentbox-no-such-command"}
	}},
	{name: "missing command by path", args: func(b *sandboxtest.Box) []string {
		return []string{"exec", "--backend", b.Backend, "--no-git-save", "--no-record", "--", "/nonexistent/bin/x"}
	}},
	{name: "command that is a directory", args: func(b *sandboxtest.Box) []string {
		return []string{"exec", "--backend", b.Backend, "--no-git-save", "--no-record", "--", "/usr"}
	}},
	{name: "empty command", args: func(b *sandboxtest.Box) []string {
		return []string{"exec", "--backend", b.Backend, "--no-git-save", "--no-record", "--", ""}
	}},
	{name: "command that is not executable", args: func(b *sandboxtest.Box) []string {
		return []string{"exec", "--backend", b.Backend, "--no-git-save", "--no-record", "--", "/etc/passwd"}
	}, codes: []int{125, 126}},
	{name: "command longer than PATH_MAX", args: func(b *sandboxtest.Box) []string {
		return []string{"exec", "--backend", b.Backend, "--no-git-save", "--no-record", "--", "/" + strings.Repeat("c", 5000)}
	}},
	{name: "working directory removed", setup: func(t *testing.T, b *sandboxtest.Box) {
		mkUserDir(t, filepath.Join(b.Repo, "gone"))
	}, dir: func(b *sandboxtest.Box) string { return filepath.Join(b.Repo, "gone") }, args: func(b *sandboxtest.Box) []string {
		return execArgs(b)
	}},
	{name: "relative HOME", env: []string{"HOME=relative/home"}, args: func(b *sandboxtest.Box) []string { return execArgs(b) }},
	{name: "HOME that is a file", env: []string{"HOME=/etc/passwd"}, args: func(b *sandboxtest.Box) []string { return execArgs(b) }},
	{name: "non-UTF-8 HOME that does not exist", env: []string{"HOME=/nonexistent/\xff"}, args: func(b *sandboxtest.Box) []string { return execArgs(b) }, works: theRepo},
	// No state directory: the grant ledger cannot list what the session may write,
	// and its refusal is the only line (no warning of the record's before it).
	{name: "no HOME and no XDG_STATE_HOME, recorded", env: []string{"HOME=", "XDG_STATE_HOME="}, args: recordedExecArgs,
		says: "starts no session it has not listed"},
	{name: "HOME that does not exist, recorded", env: []string{"HOME=/nonexistent/agentbox-home"}, args: recordedExecArgs,
		says: "starts no session it has not listed"},
	{name: "--disk-tmp with relative XDG_CACHE_HOME and no HOME", env: []string{"XDG_CACHE_HOME=rel", "HOME="},
		args: func(b *sandboxtest.Box) []string { return execArgs(b, "--disk-tmp") }},
	// HOME is overlaid after the private /tmp and /run: one that is, contains or lies
	// in them (or in /proc, /dev, /sys) would lay the host's directory back over the
	// private one, or fail with an unrelated-looking kernel error. Refused, saying so.
	{name: "HOME that is /tmp", env: []string{"HOME=/tmp"}, args: func(b *sandboxtest.Box) []string { return execArgs(b) }, says: "HOME /tmp: is /tmp"},
	{name: "HOME that is /run", env: []string{"HOME=/run"}, args: func(b *sandboxtest.Box) []string { return execArgs(b) }, says: "HOME /run: is /run"},
	{name: "HOME in /dev/shm", env: []string{"HOME=/dev/shm"}, args: func(b *sandboxtest.Box) []string { return execArgs(b) }, says: "lies inside /dev"},
	{name: "HOME in /proc", env: []string{"HOME=/proc/self/cwd"}, args: func(b *sandboxtest.Box) []string { return execArgs(b) }, says: "private mount"},
	{name: "HOME in /sys", env: []string{"HOME=/sys/kernel"}, args: func(b *sandboxtest.Box) []string { return execArgs(b) }, says: "lies inside /sys"},
	{name: "HOME below /tmp", setup: func(t *testing.T, b *sandboxtest.Box) {
		mkUserDir(t, filepath.Join("/tmp", "agentbox-home-"+filepath.Base(b.Home)))
		t.Cleanup(func() { os.RemoveAll(filepath.Join("/tmp", "agentbox-home-"+filepath.Base(b.Home))) })
	}, envOf: func(b *sandboxtest.Box) []string { return []string{"HOME=/tmp/agentbox-home-" + filepath.Base(b.Home)} },
		args: func(b *sandboxtest.Box) []string { return execArgs(b) }, says: "lies inside /tmp"},
	{name: "HOME that is a symlink to /run", setup: func(t *testing.T, b *sandboxtest.Box) {
		mustSymlink(t, "/run", filepath.Join(b.Home, "run-link"))
	}, envOf: func(b *sandboxtest.Box) []string { return []string{"HOME=" + filepath.Join(b.Home, "run-link")} },
		args: func(b *sandboxtest.Box) []string { return execArgs(b) }, says: "resolves to /run, which is /run"},
	{name: "--git-save-dir that is a file", args: func(b *sandboxtest.Box) []string {
		return []string{"exec", "--backend", b.Backend, "--git-save-dir", "/etc/passwd", "--no-record", "--", "sh", "-c", "echo RAN"}
	}},
	// The user's config file is the policy of the next session: no writable
	// directory may hold it, however it is reached (XDG_CONFIG_HOME, a ~/.config
	// that is a link into a dotfiles repository, a config file that is one).
	{name: "XDG_CONFIG_HOME inside the repo",
		envOf: func(b *sandboxtest.Box) []string {
			return []string{"XDG_CONFIG_HOME=" + filepath.Join(b.Repo, "dotconfig")}
		},
		args: func(b *sandboxtest.Box) []string { return execArgs(b) }, says: "holds agentbox's own config"},
	{name: "~/.config a symlink into the repo, no agentbox config yet", setup: func(t *testing.T, b *sandboxtest.Box) {
		mkUserDir(t, filepath.Join(b.Repo, "dotconfig"))
		mustSymlink(t, filepath.Join(b.Repo, "dotconfig"), filepath.Join(b.Home, ".config"))
	}, args: func(b *sandboxtest.Box) []string { return execArgs(b) }, says: "holds agentbox's own config"},
	{name: "config file a symlink into the repo", setup: func(t *testing.T, b *sandboxtest.Box) {
		mkUserDir(t, filepath.Join(b.Home, ".config/agentbox"))
		sandboxtest.WriteFile(t, filepath.Join(b.Repo, "agentbox.toml"), "offline = false\n")
		testenv.Chown(t, filepath.Join(b.Repo, "agentbox.toml"))
		mustSymlink(t, filepath.Join(b.Repo, "agentbox.toml"), filepath.Join(b.Home, ".config/agentbox/config.toml"))
	}, args: func(b *sandboxtest.Box) []string { return execArgs(b) }, says: "holds agentbox's own config"},
	{name: "--keep of the config directory", setup: func(t *testing.T, b *sandboxtest.Box) {
		mkUserDir(t, filepath.Join(b.Home, ".config/agentbox"))
	}, args: func(b *sandboxtest.Box) []string {
		return execArgs(b, "--keep", filepath.Join(b.Home, ".config/agentbox"))
	},
		says: "holds agentbox's own config"},
	{name: "--keep of a directory holding XDG_CONFIG_HOME", setup: func(t *testing.T, b *sandboxtest.Box) {
		mkUserDir(t, filepath.Join(b.Home, "cfg/agentbox"))
	}, envOf: func(b *sandboxtest.Box) []string { return []string{"XDG_CONFIG_HOME=" + filepath.Join(b.Home, "cfg")} },
		args: func(b *sandboxtest.Box) []string { return execArgs(b, "--keep", filepath.Join(b.Home, "cfg")) },
		says: "holds agentbox's own config"},
	{name: "--keep inside an agent's read-only directory", setup: func(t *testing.T, b *sandboxtest.Box) {
		mkUserDir(t, filepath.Join(b.Home, ".claude/skills"))
	}, args: func(b *sandboxtest.Box) []string {
		return execArgs(b, "--keep", filepath.Join(b.Home, ".claude/skills"))
	},
		says: "runs or sources later as you"},
	{name: "--add-dir holding XDG_CONFIG_HOME", setup: func(t *testing.T, b *sandboxtest.Box) {
		mkUserDir(t, filepath.Join(b.Home, "work/cfg"))
	}, envOf: func(b *sandboxtest.Box) []string {
		return []string{"XDG_CONFIG_HOME=" + filepath.Join(b.Home, "work/cfg")}
	},
		args: func(b *sandboxtest.Box) []string { return execArgs(b, "--add-dir", filepath.Join(b.Home, "work")) },
		says: "holds agentbox's own config"},
	{name: "--tmp-size 0", args: tmpSize("0"), says: "not a positive size"},
	{name: "--tmp-size negative", args: tmpSize("-8M"), says: "not a positive size"},
	{name: "--tmp-size with an unknown unit", args: tmpSize("8X"), says: "not a positive size"},
	{name: "--tmp-size with a fraction", args: tmpSize("1.5G"), says: "not a positive size"},
	{name: "--tmp-size without a unit, too small", args: tmpSize("512"), says: "below the minimum of 1M"},
	{name: "--tmp-size beyond RAM", args: tmpSize("8000T"), says: "more than this machine's memory"},
	{name: "--tmp-size overflowing", args: tmpSize("99999999999999999999"), says: "not a positive size"},
}

func tmpSize(v string) func(b *sandboxtest.Box) []string {
	return func(b *sandboxtest.Box) []string { return execArgs(b, "--tmp-size", v) }
}

func mkUserDir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	testenv.Chown(t, dir)
}

// deepDir makes home/x…x/x…x… n levels deep (each name 255 bytes) with *at calls,
// since the whole path is longer than PATH_MAX.
func deepDir(t *testing.T, home string, n int) {
	t.Helper()
	u := testenv.TestUser(t)
	fd, err := unix.Open(home, unix.O_DIRECTORY|unix.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if err := unix.Mkdirat(fd, longName, 0o755); err != nil {
			t.Fatal(err)
		}
		if u.Root {
			_ = unix.Fchownat(fd, longName, int(u.UID), int(u.GID), unix.AT_SYMLINK_NOFOLLOW)
		}
		next, err := unix.Openat(fd, longName, unix.O_DIRECTORY|unix.O_RDONLY, 0)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd = next
	}
	unix.Close(fd)
	t.Cleanup(func() { removeDeep(home, n) })
}

// removeDeep removes what deepDir made (os.RemoveAll copes, but say so explicitly).
func removeDeep(home string, _ int) { _ = os.RemoveAll(filepath.Join(home, longName)) }

// TestBadInput: every bad invocation ends with exit 125 (or the listed status) and
// one line on stderr naming the problem, never a panic or a stack trace, and never
// runs the command. A few odd-but-legal inputs may launch: then the write must land
// in the intended repository.
func TestBadInput(t *testing.T) {
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			for _, c := range badInputs {
				t.Run(c.name, func(t *testing.T) {
					b := sandboxtest.NewBox(t, backend)
					if c.setup != nil {
						c.setup(t, b)
					}
					dir := b.Repo
					if c.dir != nil {
						dir = c.dir(b)
					}
					cmd := testenv.Command(t, b.Home, b.Bin, c.args(b)...)
					cmd.Dir = dir
					if c.name == "working directory removed" {
						// Start in the directory, then remove it before agentbox looks.
						cmd.Dir = ""
						cmd.Args = append([]string{"/bin/sh", "-c", `cd "$1" && rmdir "$1" && shift && exec "$@"`, "sh", dir}, cmd.Args...)
						cmd.Path = "/bin/sh"
					}
					if b.Backend == "bwrap" {
						cmd.Env = append(cmd.Env, "AGENTBOX_BWRAP="+sandboxtest.BwrapPath(t))
					}
					cmd.Env = append(cmd.Env, c.env...)
					if c.envOf != nil {
						cmd.Env = append(cmd.Env, c.envOf(b)...)
					}
					r := sandboxtest.Run(cmd)
					checkRefusal(t, c, b, r)
				})
			}
		})
	}
}

func checkRefusal(t *testing.T, c badInput, b *sandboxtest.Box, r sandboxtest.Result) {
	t.Helper()
	for _, bad := range []string{"panic", "goroutine ", "runtime.", ".go:"} {
		if strings.Contains(r.Stderr, bad) {
			t.Fatalf("stack trace or panic:\n%s", r)
		}
	}
	if c.works != nil && r.Code == 0 {
		if !strings.Contains(r.Stdout, "RAN") {
			t.Fatalf("launch accepted but the command did not run: %s", r)
		}
		if want := filepath.Join(c.works(b), "ran"); !sandboxtest.Exists(want) {
			t.Fatalf("launch accepted but the write did not land in %q: %s", want, r)
		}
		return
	}
	if c.usage {
		if r.Code != 125 || !strings.Contains(r.Stderr, "Usage:") {
			t.Errorf("want exit 125 and the usage, got %s", r)
		}
		return
	}
	codes := c.codes
	if codes == nil {
		codes = []int{125}
	}
	ok := false
	for _, code := range codes {
		ok = ok || r.Code == code
	}
	lines := strings.Split(strings.TrimRight(r.Stderr, "\n"), "\n")
	if !ok || len(lines) != 1 || !strings.HasPrefix(lines[0], "agentbox") {
		t.Errorf("want exit %v and one line on stderr, got %s", codes, r)
	}
	if len(lines[0]) > 8192 {
		t.Errorf("message is %d bytes long", len(lines[0]))
	}
	if strings.Contains(r.Stdout, "RAN") {
		t.Errorf("the command ran: %s", r)
	}
	if c.says != "" && !strings.Contains(r.Stderr, c.says) {
		t.Errorf("the refusal does not give the reason %q: %s", c.says, r)
	}
}
