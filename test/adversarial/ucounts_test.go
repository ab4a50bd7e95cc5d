package adversarial

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/internal/ucounts"
	"github.com/agentbox/agentbox/mounts"
	"golang.org/x/sys/unix"
)

// The user's per-user kernel counts (docs/security.md): inotify instances, fanotify
// groups, user namespaces and the rest are counted per user at every level of the
// user-namespace tree, the host's included. A session takes all the inotify
// instances and fanotify groups it can; while it holds them, the user can still make
// one of each and a user namespace on the host, and a second session still launches
// and gets its end-scan watch. The user namespaces are not taken but their limit
// read: a quarter of the host's is some 24,000, which takes half a minute of two
// cores to make.

// hogScript moves into a user namespace of its own, raises its inotify and
// fanotify limits there and tries to raise its resource limits, then takes up to
// CAP_<kind> inotify instances, fanotify groups and queued signals, writes one line "TOOK kind n errno" per kind to ready (errno: what
// stopped it, 0 for the cap) and one "RLIMIT name soft hard" per resource limit
// counted per user, and holds what it took until its standard input ends (at most
// two minutes).
const hogScript = `
import ctypes, os, resource, select, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
held, lines = [], []

# First the way back: a user namespace of its own, whose root raises that
# namespace's limits and tries the resource limits' hard ones.
uid, gid = os.getuid(), os.getgid()
if libc.unshare(0x10000000) != 0:  # CLONE_NEWUSER
    sys.exit("unshare: errno %d" % ctypes.get_errno())
for f, v in (("setgroups", "deny"), ("uid_map", "0 %d 1" % uid), ("gid_map", "0 %d 1" % gid)):
    with open("/proc/self/" + f, "w") as w:
        w.write(v)
for f in ("max_inotify_instances", "max_fanotify_groups"):
    with open("/proc/sys/user/" + f, "w") as w:
        w.write("2147483647")
for r in ("NPROC", "SIGPENDING", "MSGQUEUE", "MEMLOCK"):
    try:
        resource.setrlimit(getattr(resource, "RLIMIT_" + r), (1 << 40, 1 << 40))
        lines.append("RAISED rlimit_" + r.lower())
    except (OSError, ValueError):
        pass

def take(kind, make):
    n, err = 0, 0
    while n < int(os.environ["CAP_" + kind]):
        fd = make()
        if fd < 0:
            err = ctypes.get_errno()
            break
        held.append(fd)
        n += 1
    lines.append("TOOK %s %d %d" % (kind, n, err))

take("inotify", lambda: libc.inotify_init1(os.O_CLOEXEC))
take("fanotify", lambda: libc.fanotify_init(0x200 | 0x1, 0))  # FAN_REPORT_FID|FAN_CLOEXEC
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])
take("sigpending", lambda: libc.sigqueue(os.getpid(), int(signal.SIGRTMIN), ctypes.c_void_p(0)))
for r in ("nproc", "sigpending", "msgqueue", "memlock"):
    lines.append("RLIMIT rlimit_%s %d %d" % ((r,) + resource.getrlimit(getattr(resource, "RLIMIT_" + r.upper()))))
with open("ready.tmp", "w") as w:
    w.write("\n".join(lines) + "\n")
os.rename("ready.tmp", "ready")
select.select([sys.stdin], [], [], 120)
os.remove("ready")
`

// hogMarker is the hog's first argument, by which the test finds its process.
const hogMarker = "agentbox-ucounts-hog"

// hostScript makes one of each count on the host as the test user and prints
// "kind 0" or "kind errno".
const hostScript = `
import ctypes, os, signal
libc = ctypes.CDLL(None, use_errno=True)
for kind, make in (("inotify", lambda: libc.inotify_init1(0)), ("fanotify", lambda: libc.fanotify_init(0x200, 0))):
    fd = make()
    print(kind, 0 if fd >= 0 else ctypes.get_errno())
pid = os.fork()
if pid == 0:
    os._exit(0 if libc.unshare(0x10000000) == 0 else ctypes.get_errno())
print("userns", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])
print("sigpending", 0 if libc.sigqueue(os.getpid(), int(signal.SIGRTMIN), ctypes.c_void_p(0)) == 0 else ctypes.get_errno())
`

// takenCount is a count the hog takes: the host's limit for the test user, of
// which the session may have a quarter, and the errno past its own.
type takenCount struct {
	limit int64
	errno unix.Errno
}

func taken(t *testing.T) map[string]takenCount {
	var sig unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_SIGPENDING, &sig); err != nil || sig.Cur == unix.RLIM_INFINITY {
		t.Fatalf("RLIMIT_SIGPENDING: %v, %d", err, sig.Cur)
	}
	return map[string]takenCount{
		"inotify":    {readInt(t, "/proc/sys/fs/inotify/max_user_instances"), unix.EMFILE},
		"fanotify":   {readInt(t, "/proc/sys/fs/fanotify/max_user_groups"), unix.EMFILE},
		"sigpending": {int64(sig.Cur), unix.EAGAIN}, // the launcher's: its ids, its limits
	}
}

func readInt(t *testing.T, path string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(strings.TrimSpace(sandboxtest.ReadFile(t, path)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestUserCounts: a session, in a user namespace of its own whose limits it has
// raised, takes all the inotify instances, fanotify groups and queued signals it
// can. Its session's limits stop it (EMFILE, EAGAIN) at a quarter of the user's
// host limit, its resource limits are a quarter of the launcher's; every other limit of /proc/sys/user, read in each user namespace between the
// command and the host, is at most a quarter of the host's too; while the session
// holds what it took, the test user can still make an inotify instance, a fanotify
// group and a user namespace and queue a signal on the host, and a second session launches and takes
// its end scan from its watch (a fanotify group and marks of the host's). The hog
// stops at 3/8 of a host limit (CAP_<kind>), so that where nothing stops it (main
// before the fix) the row fails on the cap without leaving the machine's other
// users of the test user without.
func TestUserCounts(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skip(t, "needs root: reads the sandbox's user namespaces' limits from inside them")
	}
	if _, err := os.Stat("/proc/sys/fs/fanotify/max_user_groups"); err != nil {
		testenv.SkipKernel(t, "fanotify_fid", "no fanotify limits to take from (Linux 5.13): %v", err)
	}
	runners := everyRunner(t)
	want, err := ucounts.Limits()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(want, mounts.UserLimit.IsRLimit) {
		testenv.SkipKernel(t, "ucounts_rlimits", "no resource limit counted per user namespace (Linux 5.14), none lowered: %v", want)
	}
	counts := taken(t)
	for _, backend := range runners {
		t.Run(backend, func(t *testing.T) {
			second := watchedBox(t, backend)
			x := newTarget(t, backend)
			cmd := x.Command(x.Repo, []string{"--no-git-save", "--no-record"}, "")
			cmd.Args = append(cmd.Args, "--", "/usr/bin/python3", "-c", hogScript, hogMarker)
			for kind, c := range counts {
				cmd.Env = append(cmd.Env, fmt.Sprintf("CAP_%s=%d", kind, c.limit*3/8))
			}
			release := holdSession(t, cmd, filepath.Join(x.Repo, "ready"), "took its counts")
			took := sandboxtest.ReadFile(t, filepath.Join(x.Repo, "ready"))
			t.Logf("the session took, with the host's limits %v:\n%s", counts, took)
			for kind, c := range counts {
				var n int64
				var errno int
				if _, err := fmt.Sscanf(lineOf(took, "TOOK "+kind+" "), "TOOK "+kind+" %d %d", &n, &errno); err != nil {
					t.Fatalf("%s: no count: %v\n%s", kind, err, took)
				}
				if errno != int(c.errno) || n > c.limit/4 {
					t.Errorf("%s: the session took %d of the user's %d (errno %d): no limit of its own stopped it at a quarter", kind, n, c.limit, errno)
				}
			}
			if strings.Contains(took, "RAISED ") {
				t.Errorf("the session raised a hard resource limit:\n%s", took)
			}
			checkRLimits(t, took, want)
			checkNamespaceLimits(t, hogPID(t), want)
			host := testenv.Command(t, x.Home, "/usr/bin/python3", "-c", hostScript)
			out, err := host.CombinedOutput()
			for _, kind := range []string{"inotify", "fanotify", "userns", "sigpending"} {
				if !strings.Contains(string(out), kind+" 0\n") {
					t.Errorf("while the session holds its counts, the user cannot make a %s on the host: %s (%v)", kind, out, err)
				}
			}
			second.endScanFromWatch(t)
			r := release()
			if r.Code != 0 {
				t.Errorf("the session: %s", r)
			}
		})
	}
}

// checkRLimits: the hog's resource limits counted per user, soft and hard, are at
// most the session's share of the launcher's.
func checkRLimits(t *testing.T, took string, want []mounts.UserLimit) {
	t.Helper()
	for _, l := range want {
		if !l.IsRLimit() {
			continue
		}
		var soft, hard int64
		if _, err := fmt.Sscanf(lineOf(took, "RLIMIT "+l.Name+" "), "RLIMIT "+l.Name+" %d %d", &soft, &hard); err != nil {
			t.Fatalf("%s: %v\n%s", l.Name, err, took)
		}
		if soft < 0 || hard < 0 || soft > l.Max || hard > l.Max {
			t.Errorf("%s: the session's limit is %d (hard %d); want at most %d, a quarter of the launcher's", l.Name, soft, hard, l.Max)
		}
	}
}

// hogPID is the host PID of the session's hog.
func hogPID(t *testing.T) int {
	t.Helper()
	uid := int(testenv.TestUser(t).UID)
	for _, p := range sandboxtest.Pgrep("/usr/bin/python3") {
		b, err := os.ReadFile("/proc/" + p + "/cmdline")
		var st unix.Stat_t
		if err != nil || unix.Stat("/proc/"+p, &st) != nil || int(st.Uid) != uid {
			continue
		}
		if strings.HasSuffix(string(b), "\x00"+hogMarker+"\x00") {
			pid, _ := strconv.Atoi(p)
			return pid
		}
	}
	t.Fatal("no hog process on the host")
	return 0
}

// nsGetParent is NS_GET_PARENT (linux/nsfs.h): the parent of a user namespace.
const nsGetParent = 0xb702

// checkNamespaceLimits reads /proc/sys/user in each user namespace from the
// process pid's up to the host's (exclusive), entering each (nsenter, as root),
// and checks that for every limit the tightest is the session's share of the
// host's (internal/ucounts): the kernel checks each level.
func checkNamespaceLimits(t *testing.T, pid int, want []mounts.UserLimit) {
	t.Helper()
	var self unix.Stat_t
	if err := unix.Stat("/proc/self/ns/user", &self); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/user", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	tightest := map[string]int64{}
	for depth := 0; ; depth++ {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			t.Fatal(err)
		}
		if st.Ino == self.Ino && st.Dev == self.Dev {
			unix.Close(fd)
			break
		}
		ns := os.NewFile(uintptr(fd), "userns")
		cmd := exec.Command("nsenter", "--preserve-credentials", "--user=/proc/self/fd/3", "--", "grep", "-H", ".", "-r", "/proc/sys/user")
		cmd.ExtraFiles = []*os.File{ns}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("read the limits %d levels above the hog: %v\n%s", depth, err, out)
		}
		for l := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
			path, v, _ := strings.Cut(l, ":")
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("limit %q: %v", l, err)
			}
			name := filepath.Base(path)
			if cur, ok := tightest[name]; !ok || n < cur {
				tightest[name] = n
			}
		}
		parent, err := unix.IoctlRetInt(fd, nsGetParent)
		ns.Close()
		if err != nil {
			t.Fatalf("the parent of the user namespace %d levels above the hog: %v", depth, err)
		}
		fd = parent
	}
	for _, l := range want {
		if l.IsRLimit() {
			continue
		}
		if got, ok := tightest[l.Name]; !ok || got > l.Max {
			t.Errorf("%s: the session's user namespaces allow %d (read %v); want at most %d, a quarter of the host's", l.Name, got, ok, l.Max)
		}
	}
}

// lineOf is the first line of s that starts with prefix, or "".
func lineOf(s, prefix string) string {
	for l := range strings.SplitSeq(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

// watched is a second box whose sessions' end scans come from the watch: a tree of
// more files than the audit watches below (session/hostaudit: minWatchFiles),
// recorded once.
type watched struct{ *sandboxtest.Box }

func watchedBox(t *testing.T, backend string) watched {
	if backend == sandboxtest.GoAPI {
		backend = "native" // the CLI prints the end scan's phases
	}
	b := sandboxtest.NewBox(t, backend)
	for d := range 30 {
		if err := os.Mkdir(filepath.Join(b.Repo, fmt.Sprintf("d%02d", d)), 0o755); err != nil {
			t.Fatal(err)
		}
		for i := range 70 {
			sandboxtest.WriteFile(t, filepath.Join(b.Repo, fmt.Sprintf("d%02d/f%02d", d, i)), "content\n")
		}
	}
	testenv.Chown(t, b.Repo)
	testenv.Git(t, b.Home, b.Repo, "add", "-A")
	testenv.Git(t, b.Home, b.Repo, "commit", "-q", "-m", "many")
	w := watched{b}
	w.run(t, "true") // the first record, which no watch serves
	return w
}

func (w watched) run(t *testing.T, script string) sandboxtest.Result {
	cmd := w.Command(w.Repo, []string{"--no-git-save"}, script)
	cmd.Env = append(cmd.Env, "AGENTBOX_TIMINGS=1")
	r := sandboxtest.Run(cmd)
	if r.Code != 0 {
		t.Fatalf("second session %q: %s", script, r)
	}
	return r
}

// endScanFromWatch runs a session that edits a file and checks that its end scan
// came from its watch.
func (w watched) endScanFromWatch(t *testing.T) {
	r := w.run(t, "echo edit >> d03/f05")
	if !strings.Contains(r.Stderr, "host: end scan, from the watch") {
		t.Errorf("a second session's end scan did not come from its watch:\n%s", r.Stderr)
	}
}
