// Package behaviour holds the behaviour table: one row per promise of docs/promises.md, each
// launching the real agentbox binary as an unprivileged user and checking from inside
// the sandbox and from the host. Every row runs against every backend.
package behaviour

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/kernel"
	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/nsinit"
)

// row is one promise.
type row struct {
	name string
	test func(t *testing.T, b *box)
}

var rows = []row{
	{"P1 host read-only, every submount too", rootReadOnly},
	{"P2 repo writable, changes reach the host", repoWritable},
	{"P3 HOME overlay: writes stay inside", homeOverlay},
	{"P3 repo under HOME punches through the overlay", repoUnderHome},
	{"P4 /tmp and /run private and empty", tmpRunPrivate},
	{"P4 host sockets below /run unreachable", runSocketHidden},
	{"P4 host path sockets unreachable, also those bound late", hostPathSockets},
	{"P4 host path sockets: the dry run names Landlock or the masks; --nested-sandbox lets the command mount", hostSocketsMechanism},
	{"P5 new namespaces, own uid, host processes invisible", namespaces},
	{"P5 --offline: loopback only", offline},
	{"P6 repo below /tmp stays reachable", repoBelowTmp},
	{"P7 Git hooks and config read-only", gitReadOnly},
	{"P7 missing hooks and config cannot be created", gitMissingNotCreatable},
	{"P7 submodule and worktree-config paths read-only", gitModulesReadOnly},
	{"P7 symlinked Git paths refused before launch", gitSymlinks},
	{"P7 protected paths cannot be moved away", gitCannotMoveAway},
	{"P7 a replaced .git or a planted redirection never runs on the host", gitPlantNeverRuns},
	{"read-only mounts cannot be undone from inside", cannotUndo},
	{"P10 --disk-tmp directory removed after every exit", diskTmp},
	{"command runs without privileges", noPrivileges},
	{"no host fd leaks into the command, init hidden", noLeakedFds},
	{"PID 1 is the init this build promises, and catches no signal", pid1Init},
	{"exit status: command's, 128+N, 125", exitStatuses},
	{"signals are forwarded to the command", signalsForwarded},
	{"command dies with the launcher", diesWithLauncher},
	{"nothing of the session runs once agentbox returns", nothingRunsAfter},
	{"working directory follows the caller inside the repo", workdir},
	{"bad repositories refused with 125 and one line", badRepos},
}

// runners are the backends with the native one once per runner of its compiled
// plan: the raw init and the Go init (sandboxtest.NativeGo) where this build and
// kernel have the raw one (elsewhere "native" is the Go init already); and the
// native backend once more through the Go API's door (sandboxtest.GoAPI).
func runners(t *testing.T) []string {
	return append(cliRunners(t), sandboxtest.GoAPI)
}

// cliRunners are the runners of agentbox exec alone: for rows about what only the
// CLI reads (config files, a repository's .agentbox.toml, exec's flags, sudo).
func cliRunners(t *testing.T) []string {
	list := backends(t)
	if nsinit.RawInitAvailable() {
		list = append(list, sandboxtest.NativeGo)
	}
	return list
}

// TestPromises runs every row against every backend, the native one once per runner
// of its compiled plan (the raw init and the Go init).
func TestPromises(t *testing.T) {
	for _, backend := range runners(t) {
		t.Run(backend, func(t *testing.T) {
			for _, r := range rows {
				t.Run(r.name, func(t *testing.T) {
					r.test(t, newBox(t, backend))
				})
			}
		})
	}
}

// mountEntry is one line of /proc/self/mountinfo as seen inside the sandbox.
type mountEntry struct {
	point string
	opts  string
}

func parseMountinfo(s string) []mountEntry {
	var out []mountEntry
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 {
			continue
		}
		out = append(out, mountEntry{point: strings.ReplaceAll(f[4], `\040`, " "), opts: f[5]})
	}
	return out
}

func readOnly(opts string) bool {
	for _, o := range strings.Split(opts, ",") {
		if o == "ro" {
			return true
		}
	}
	return false
}

func under(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, dir+"/")
}

func rootReadOnly(t *testing.T, b *box) {
	out := b.ok(`for p in /usr/agentbox-probe /etc/agentbox-probe /var/agentbox-probe; do
		if touch "$p" 2>/dev/null; then echo "WROTE $p"; fi
	done
	cat /proc/self/mountinfo`)
	if strings.Contains(out, "WROTE") {
		t.Fatalf("host tree writable:\n%s", out)
	}
	// Every mount outside the sandbox's own writable places is read-only.
	writable := []string{b.repo, "/tmp", "/run", "/proc", "/dev", b.home}
	var bad []string
	for _, m := range parseMountinfo(out) {
		inside := false
		for _, w := range writable {
			if under(m.point, w) {
				inside = true
			}
		}
		if !inside && !readOnly(m.opts) {
			bad = append(bad, m.point+" "+m.opts)
		}
	}
	if len(bad) > 0 {
		t.Fatalf("writable host mounts inside the sandbox: %v", bad)
	}
	for _, p := range []string{"/usr/agentbox-probe", "/etc/agentbox-probe"} {
		if exists(p) {
			t.Fatalf("%s created on the host", p)
		}
	}
	r := b.sh(`echo x > /etc/agentbox-probe`)
	if r.code == 0 || !strings.Contains(r.stderr, "Read-only file system") {
		t.Fatalf("write to /etc did not fail with EROFS: %s", r)
	}
}

func repoWritable(t *testing.T, b *box) {
	b.ok(`echo changed > README && mkdir -p sub/dir && echo new > sub/dir/file`)
	if got := readFile(t, filepath.Join(b.repo, "README")); got != "changed\n" {
		t.Fatalf("README on host = %q", got)
	}
	if got := readFile(t, filepath.Join(b.repo, "sub/dir/file")); got != "new\n" {
		t.Fatalf("new file on host = %q", got)
	}
}

func homeOverlay(t *testing.T, b *box) {
	// The overlay's root is HOME as the host has it: its owner, group and mode, a
	// setgid bit included (package overlay's rule, which every executor applies).
	if err := os.Chmod(b.home, 0o750|os.ModeSetgid); err != nil {
		t.Fatal(err)
	}
	u := testenv.TestUser(t)
	if got, want := b.ok(`stat -c '%a %u %g' ~`), fmt.Sprintf("2750 %d %d\n", u.UID, u.GID); got != want {
		t.Errorf("HOME inside: %q, want the host's %q", got, want)
	}
	out := b.ok(`echo inside >> ~/.profile && echo new > ~/created && cat ~/.profile ~/created && rm ~/.profile && ls -a ~`)
	if !strings.Contains(out, "original profile\ninside\nnew\n") {
		t.Fatalf("writes to HOME not visible inside:\n%s", out)
	}
	if strings.Contains(out, ".profile") {
		t.Fatalf("deleted file still listed inside:\n%s", out)
	}
	if got := readFile(t, filepath.Join(b.home, ".profile")); got != "original profile\n" {
		t.Fatalf("host ~/.profile changed: %q", got)
	}
	if exists(filepath.Join(b.home, "created")) {
		t.Fatal("file created in HOME reached the host")
	}
	// A second session starts from the real HOME again.
	if out := b.ok(`ls -a ~`); strings.Contains(out, "created") {
		t.Fatalf("overlay not disposable: %s", out)
	}
}

func repoUnderHome(t *testing.T, b *box) {
	// The fixture's repo is below HOME: writes there are real, writes beside it are not.
	b.ok(`echo real > "$REPO/through" && echo fake > ~/beside`)
	if got := readFile(t, filepath.Join(b.repo, "through")); got != "real\n" {
		t.Fatalf("repo below HOME not writable through the overlay: %q", got)
	}
	if exists(filepath.Join(b.home, "beside")) {
		t.Fatal("write beside the repo reached the host HOME")
	}
}

func tmpRunPrivate(t *testing.T, b *box) {
	marker := filepath.Join("/tmp", "agentbox-host-marker-"+filepath.Base(b.home))
	writeFile(t, marker, "host")
	defer os.Remove(marker)
	// /run holds nothing but agentbox's own /run/agentbox (the push guard's real Git).
	out := b.ok(`echo "$(ls -A /tmp | wc -l) $(ls -A /run | tr '\n' ' ')"; echo x > /tmp/inside && echo y > /run/inside && echo wrote`)
	if out != "0 agentbox \nwrote\n" {
		t.Fatalf("/tmp or /run not empty at start:\n%s", out)
	}
	if exists("/tmp/inside") && readFile(t, "/tmp/inside") == "x\n" {
		t.Fatal("sandbox /tmp write reached the host")
	}
}

func runSocketHidden(t *testing.T, b *box) {
	u := testenv.TestUser(t)
	dir := fmt.Sprintf("/run/user/%d", u.UID)
	if !u.Root {
		if _, err := os.Stat(dir); err != nil {
			dir = ""
		}
	}
	if dir == "" {
		testenv.Skip(t, "no /run/user directory for this user and not root to make one")
	}
	if u.Root {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		testenv.Chown(t, dir)
	}
	sock := filepath.Join(dir, "agentbox-test.sock")
	os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	testenv.Chown(t, sock)
	r := b.sh(fmt.Sprintf(`test -e %s && echo VISIBLE; ls -A /run`, sock))
	if r.code != 0 || strings.Contains(r.stdout, "VISIBLE") || strings.TrimSpace(r.stdout) != "agentbox" {
		t.Fatalf("host /run socket reachable or /run not empty: %s", r)
	}
}

func hostNamespaces(t *testing.T) map[string]string {
	ns := map[string]string{}
	for _, n := range []string{"user", "mnt", "pid", "ipc", "uts", "cgroup", "net"} {
		v, err := os.Readlink("/proc/self/ns/" + n)
		if err != nil {
			t.Fatal(err)
		}
		ns[n] = v
	}
	return ns
}

func nsInside(t *testing.T, b *box, args ...string) map[string]string {
	out := b.ok(`for n in user mnt pid ipc uts cgroup net; do echo "$n $(readlink /proc/self/ns/$n)"; done`, args...)
	ns := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		if len(f) == 2 {
			ns[f[0]] = f[1]
		}
	}
	return ns
}

func namespaces(t *testing.T, b *box) {
	host := hostNamespaces(t)
	inside := nsInside(t, b)
	for _, n := range []string{"user", "mnt", "pid", "ipc", "uts", "cgroup"} {
		if inside[n] == "" || inside[n] == host[n] {
			t.Errorf("%s namespace not new: inside %q host %q", n, inside[n], host[n])
		}
	}
	if inside["net"] != host["net"] {
		t.Errorf("network namespace changed without --offline")
	}
	u := testenv.TestUser(t)
	hostname, _ := os.Hostname()
	out := b.ok(`id -u; id -g; hostname; ls /proc | grep -c '^[0-9]'; hostname agentbox-changed 2>/dev/null && echo CHANGED; true`)
	f := strings.Fields(out)
	if len(f) < 4 || f[0] != fmt.Sprint(u.UID) || f[1] != fmt.Sprint(u.GID) {
		t.Fatalf("uid/gid inside: %q, want %d %d", out, u.UID, u.GID)
	}
	if f[2] != hostname {
		t.Errorf("hostname inside %q, host %q", f[2], hostname)
	}
	if n := f[3]; n == "0" || len(n) > 1 {
		t.Errorf("inside sees %s processes; host processes must be invisible", n)
	}
	if strings.Contains(out, "CHANGED") {
		t.Error("hostname change succeeded inside")
	}
	if h, _ := os.Hostname(); h != hostname {
		t.Errorf("host hostname changed to %q", h)
	}
}

func offline(t *testing.T, b *box) {
	host := hostNamespaces(t)
	inside := nsInside(t, b, "--offline")
	if inside["net"] == host["net"] {
		t.Fatal("--offline kept the host network namespace")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	// /sys is the host's (its net entries are the host namespace's): ask the kernel
	// through netlink instead.
	out := b.ok(fmt.Sprintf(`ip -o link | awk -F': ' '{print $2}' | tr '\n' ' '; echo
		ip -o link show lo | grep -q '[<,]UP[,>]' && echo 0x1 || echo 0x0
		if command -v bash >/dev/null && bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d' 2>/dev/null; then echo CONNECTED; fi`, port), "--offline")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 2 || strings.TrimSpace(lines[0]) != "lo" {
		t.Fatalf("interfaces inside --offline: %q", out)
	}
	var flags int
	fmt.Sscanf(strings.TrimSpace(lines[1]), "0x%x", &flags)
	if flags&1 == 0 {
		t.Fatalf("loopback not up: flags %s", lines[1])
	}
	if strings.Contains(out, "CONNECTED") {
		t.Fatal("reached a host TCP listener from --offline")
	}
}

func repoBelowTmp(t *testing.T, b *box) {
	u := testenv.TestUser(t)
	dir, err := os.MkdirTemp("/tmp", "agentbox-repo-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if u.Root {
		testenv.Chown(t, dir)
	}
	r := run(b.command(dir, []string{"--repo", dir}, `echo ok > inside && pwd && ls -A /tmp`))
	if r.code != 0 {
		t.Fatalf("repo below /tmp: %s", r)
	}
	if got := readFile(t, filepath.Join(dir, "inside")); got != "ok\n" {
		t.Fatalf("write in repo below /tmp did not reach host: %q", got)
	}
	if !strings.HasPrefix(r.stdout, dir+"\n") {
		t.Fatalf("workdir %q, want %s", r.stdout, dir)
	}
	if strings.Contains(r.stdout, "agentbox-host") {
		t.Fatalf("host /tmp visible: %s", r.stdout)
	}
}

func gitReadOnly(t *testing.T, b *box) {
	before := readFile(t, filepath.Join(b.repo, ".git/config"))
	r := b.sh(`echo '[core]
	fsmonitor = touch /tmp/pwned' >> .git/config && echo WROTE-CONFIG
		git config core.hooksPath /tmp/x && echo WROTE-GITCONFIG
		printf '#!/bin/sh\ntouch pwned\n' > .git/hooks/pre-commit && echo WROTE-HOOK
		rm -f .git/hooks/pre-commit.sample && echo REMOVED-SAMPLE
		git add README && git commit -qm x && echo COMMITTED`)
	if strings.Contains(r.stdout, "WROTE") || strings.Contains(r.stdout, "REMOVED") {
		t.Fatalf("protected Git path writable:\n%s", r)
	}
	if !strings.Contains(r.stdout, "COMMITTED") {
		t.Fatalf("ordinary git commit failed inside:\n%s", r)
	}
	if after := readFile(t, filepath.Join(b.repo, ".git/config")); after != before {
		t.Fatalf(".git/config changed on host:\n%s", after)
	}
	if exists(filepath.Join(b.repo, ".git/hooks/pre-commit")) || !exists(filepath.Join(b.repo, ".git/hooks/pre-commit.sample")) {
		t.Fatal("hooks changed on host")
	}
}

func gitMissingNotCreatable(t *testing.T, b *box) {
	if err := os.RemoveAll(filepath.Join(b.repo, ".git/hooks")); err != nil {
		t.Fatal(err)
	}
	testenv.Git(t, b.home, b.repo, "config", "extensions.worktreeConfig", "true")
	r := b.sh(`mkdir -p .git/hooks 2>/dev/null; printf '#!/bin/sh\ntouch pwned\n' > .git/hooks/pre-commit && echo WROTE-HOOK
		echo '[core]
	pager = touch pwned' > .git/config.worktree && echo WROTE-WT; true`)
	if r.code != 0 || strings.Contains(r.stdout, "WROTE") {
		t.Fatalf("missing protected paths were creatable:\n%s", r)
	}
	if exists(filepath.Join(b.repo, ".git/hooks/pre-commit")) {
		t.Fatal("hook created on host")
	}
	if s := readFile(t, filepath.Join(b.repo, ".git/config.worktree")); s != "" {
		t.Fatalf("config.worktree written on host: %q", s)
	}
}

func gitModulesReadOnly(t *testing.T, b *box) {
	mod := filepath.Join(b.repo, ".git/modules/lib")
	for _, d := range []string{"hooks", "objects", "refs"} {
		if err := os.MkdirAll(filepath.Join(mod, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(mod, "HEAD"), "ref: refs/heads/main\n")
	writeFile(t, filepath.Join(mod, "config"), "[core]\n\tbare = false\n")
	testenv.Chown(t, mod)
	r := b.sh(`echo '[core]
	fsmonitor = touch pwned' >> .git/modules/lib/config && echo WROTE-CFG
		touch .git/modules/lib/hooks/post-checkout && echo WROTE-HOOK
		touch .git/modules/lib/objects/ok && echo OBJECTS-OK; true`)
	if strings.Contains(r.stdout, "WROTE") || !strings.Contains(r.stdout, "OBJECTS-OK") {
		t.Fatalf("submodule gitdir: config/hooks must be read-only, objects writable:\n%s", r)
	}
}

func gitCannotMoveAway(t *testing.T, b *box) {
	mod := filepath.Join(b.repo, ".git/modules/lib")
	for _, d := range []string{"hooks", "objects", "refs"} {
		if err := os.MkdirAll(filepath.Join(mod, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(mod, "HEAD"), "ref: refs/heads/main\n")
	writeFile(t, filepath.Join(mod, "config"), "[core]\n")
	testenv.Chown(t, b.repo)
	r := b.sh(`mv .git .git.old && echo MOVED-GIT
		mv .git/modules .git/m2 && echo MOVED-MODULES
		mv .git/modules/lib .git/modules/lib2 && echo MOVED-LIB
		mv .git/hooks .git/hooks2 && echo MOVED-HOOKS
		rm -rf .git/hooks 2>/dev/null; rmdir .git/hooks 2>/dev/null && echo REMOVED-HOOKS
		mkdir -p x && mv x .git/hooks 2>/dev/null && echo REPLACED-HOOKS
		touch .git/objects/ok && echo OBJECTS-WRITABLE; true`)
	if strings.Contains(r.stdout, "MOVED") || strings.Contains(r.stdout, "REMOVED") || strings.Contains(r.stdout, "REPLACED") {
		t.Fatalf("a protected path was moved away:\n%s", r)
	}
	if !strings.Contains(r.stdout, "OBJECTS-WRITABLE") {
		t.Fatalf(".git no longer writable:\n%s", r)
	}
	if !exists(filepath.Join(b.repo, ".git/hooks")) || exists(filepath.Join(b.repo, ".git.old")) {
		t.Fatal("host .git changed shape")
	}
}

// gitPlantNeverRuns: the session tries to make the operator's next git command in
// the repository run a program — by replacing .git with a copy whose config sets
// core.fsmonitor, or, .git being pinned, by pointing .git/commondir at such a copy
// in the working tree. Either is refused inside or found and moved aside by the
// audit after the session: the operator's git status on the host runs nothing.
func gitPlantNeverRuns(t *testing.T, b *box) {
	pwned := filepath.Join(b.home, "pwned-fsmonitor")
	script := fmt.Sprintf(`plant() { printf '[core]\n\tfsmonitor = touch %[1]s\n' >> "$1/config"; }
		if mv .git .git.old 2>/dev/null; then
			mkdir .git && cp -a .git.old/. .git/ && plant .git && echo REPLACED-GIT
		fi
		mkdir -p evil && cp -a .git/objects .git/refs .git/HEAD evil/ 2>/dev/null
		printf '[core]\n\trepositoryformatversion = 0\n' > evil/config && plant evil
		echo "$REPO/evil" > .git/commondir && echo PLANTED-COMMONDIR
		true`, pwned)
	r := b.sh(script)
	if r.code != 0 {
		t.Fatalf("%s", r)
	}
	if strings.Contains(r.stdout, "REPLACED-GIT") {
		t.Errorf(".git could be replaced inside the sandbox:\n%s", r)
	}
	st := testenv.Command(t, b.home, "git", "status")
	st.Dir = b.repo
	out, _ := st.CombinedOutput()
	if exists(pwned) {
		t.Fatalf("the operator's git status ran the program the session planted:\n%s\ngit status: %s", r, out)
	}
}

func gitSymlinks(t *testing.T, b *box) {
	ssh := filepath.Join(b.home, ".ssh")
	if err := os.Mkdir(ssh, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(ssh, "authorized_keys"), "key\n")
	hooks := filepath.Join(b.repo, ".git/hooks")
	cfg := filepath.Join(b.repo, ".git/config")
	passwd := readFile(t, "/etc/passwd")
	// A link cannot be kept from being replaced inside the writable repository, so
	// a symlinked hooks dir or config is refused before anything is set up, wherever
	// it points — out of the repo, into it, or nowhere.
	for _, c := range []struct{ path, target string }{
		{hooks, ssh}, {cfg, "/etc/passwd"}, {hooks, "../githooks"},
	} {
		saved := c.path + ".saved"
		if err := os.Rename(c.path, saved); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(c.target, c.path); err != nil {
			t.Fatal(err)
		}
		testenv.Chown(t, b.home)
		r := b.sh(`echo evil >> .git/hooks/authorized_keys; echo evil >> .git/config; mkdir -p githooks; touch .git/hooks/pre-commit; touch "$REPO/ran"`)
		lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
		if r.code != 125 || len(lines) != 1 || !strings.Contains(r.stderr, c.path+" is a symlink") {
			t.Fatalf("%s -> %s not refused with one line: %s", c.path, c.target, r)
		}
		if exists(filepath.Join(b.repo, "ran")) || exists(filepath.Join(b.repo, "githooks")) {
			t.Fatal("the command ran, or something was created, despite the refusal")
		}
		os.Remove(c.path)
		if err := os.Rename(saved, c.path); err != nil {
			t.Fatal(err)
		}
	}
	if got := readFile(t, filepath.Join(ssh, "authorized_keys")); got != "key\n" || exists(filepath.Join(ssh, "pre-commit")) {
		t.Fatalf("~/.ssh changed: %q", got)
	}
	if readFile(t, "/etc/passwd") != passwd {
		t.Fatal("/etc/passwd changed")
	}
}

func cannotUndo(t *testing.T, b *box) {
	script := `
	umount /usr 2>/dev/null && echo UMOUNT-USR
	umount -l .git/hooks 2>/dev/null && echo UMOUNT-HOOKS
	mount -o remount,rw / 2>/dev/null && echo REMOUNT-ROOT
	if command -v unshare >/dev/null; then
		unshare -Urm sh -c '
			mount -o remount,rw / 2>/dev/null && echo NESTED-REMOUNT-ROOT
			mount -o remount,rw,bind .git/config 2>/dev/null && echo NESTED-REMOUNT-CONFIG
			umount .git/hooks 2>/dev/null && echo NESTED-UMOUNT-HOOKS
			umount -l .git/hooks 2>/dev/null && echo NESTED-UMOUNT-L-HOOKS
			umount -l /tmp 2>/dev/null && echo NESTED-UMOUNT-TMP
			touch /etc/agentbox-nested .git/hooks/pre-commit 2>/dev/null && echo NESTED-WROTE
			mount --bind /tmp .git/hooks 2>/dev/null && touch .git/hooks/x 2>/dev/null && echo NESTED-BIND-HOOKS
			echo nested-ran
		' 2>/dev/null || echo nested-refused
	else
		echo nested-ran
	fi`
	out := b.ok(script)
	// Where the command's Landlock domain denies host path sockets (Linux 7.1+),
	// Landlock refuses it every mount, so unshare -m stops at its first one.
	if !strings.Contains(out, "nested-ran") && !(kernel.CanDenyPathSockets() && strings.Contains(out, "nested-refused")) {
		t.Fatalf("nested namespace attempt did not run:\n%s", out)
	}
	for _, bad := range []string{"UMOUNT-USR", "UMOUNT-HOOKS", "REMOUNT-ROOT", "NESTED-REMOUNT-ROOT", "NESTED-REMOUNT-CONFIG", "NESTED-UMOUNT-HOOKS", "NESTED-UMOUNT-L-HOOKS", "NESTED-UMOUNT-TMP", "NESTED-WROTE"} {
		if strings.Contains(out, bad) {
			t.Errorf("%s succeeded:\n%s", bad, out)
		}
	}
	if exists("/etc/agentbox-nested") || exists(filepath.Join(b.repo, ".git/hooks/pre-commit")) || exists(filepath.Join(b.repo, ".git/hooks/x")) {
		t.Fatal("nested namespace wrote to a protected host path")
	}
}

func diskTmpDirs(t *testing.T, b *box) []string {
	m, _ := filepath.Glob(filepath.Join(b.home, ".cache/agentbox/tmp/*"))
	return m
}

func diskTmp(t *testing.T, b *box) {
	// The last mount at /tmp is the one in force (a host /tmp may be a tmpfs below it).
	out := b.ok(`stat -c '%a' /tmp; echo data > /tmp/f; ls /tmp; awk '$5=="/tmp"{root=$4} END{print root}' /proc/self/mountinfo`, "--disk-tmp")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 3 || lines[0] != "700" || lines[1] != "f" {
		t.Fatalf("--disk-tmp /tmp: %q", out)
	}
	if !strings.Contains(lines[2], "/.cache/agentbox/tmp/") {
		t.Fatalf("/tmp not bound from the cache dir: %q", lines[2])
	}
	if d := diskTmpDirs(t, b); len(d) != 0 {
		t.Fatalf("--disk-tmp dir left after exit 0: %v", d)
	}
	for _, script := range []string{`echo x > /tmp/y; exit 3`, `echo x > /tmp/y; kill -TERM $$`} {
		r := b.sh(script, "--disk-tmp")
		if r.code != 3 && r.code != 143 {
			t.Fatalf("%s: %s", script, r)
		}
		if d := diskTmpDirs(t, b); len(d) != 0 {
			t.Fatalf("--disk-tmp dir left after %q: %v", script, d)
		}
	}
}

func noPrivileges(t *testing.T, b *box) {
	out := b.ok(`grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs|Seccomp):' /proc/self/status
		perl -e 'my $c = "x"; ioctl(STDIN, 0x5412, $c) or print "TIOCSTI errno ", $!+0, "\n"' </dev/null`)
	for _, c := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
		if !strings.Contains(out, c+":\t0000000000000000") {
			t.Errorf("%s not empty:\n%s", c, out)
		}
	}
	if !strings.Contains(out, "NoNewPrivs:\t1") {
		t.Errorf("no_new_privs not set:\n%s", out)
	}
	// Without the filter the ioctl on /dev/null fails with ENOTTY (25); the filter
	// answers EPERM (1) before the terminal layer is reached.
	if !strings.Contains(out, "TIOCSTI errno 1\n") {
		t.Errorf("TIOCSTI not refused by the filter:\n%s", out)
	}
}

func noLeakedFds(t *testing.T, b *box) {
	// The caller passes a directory fd (fd 3) and a file fd (fd 4) without close-on-exec.
	dir, err := os.Open(b.home)
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	f, err := os.Open("/etc/hostname")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// ls runs with neither pipe nor redirection: for "ls | sort" the shell holds the
	// pipe's ends, and for "ls >f" dash keeps a saved stdout, while ls lists the
	// shell's fds; either reads as a leak that is not there.
	cmd := b.command(b.repo, nil, `ls /proc/$$/fd; echo END-FDS
		cat /proc/1/environ >/dev/null 2>&1 && echo INIT-ENVIRON
		readlink /proc/1/exe >/dev/null 2>&1 && echo INIT-EXE
		ls /proc/1/fd >/dev/null 2>&1 && echo INIT-FDS
		(exec 3</proc/1/mem) 2>/dev/null && echo INIT-MEM
		(exec 3</proc/$$/mem) 2>/dev/null && echo OWN-MEM
		true`)
	cmd.ExtraFiles = []*os.File{dir, f}
	r := run(cmd)
	if r.code != 0 {
		t.Fatalf("%s", r)
	}
	fds, _, _ := strings.Cut(r.stdout, "END-FDS")
	if got := strings.Join(strings.Fields(fds), " "); got != "0 1 2" {
		t.Errorf("command has fds %q, want 0 1 2", got)
	}
	// Under the native backend's raw init, PID 1 shares the launcher's memory: none
	// of it may be reachable (nsinit.Options.RawInit).
	if !strings.Contains(r.stdout, "OWN-MEM") {
		t.Errorf("the command cannot open its own /proc/PID/mem: the INIT-MEM probe proves nothing\n%s", r)
	}
	for _, bad := range []string{"INIT-ENVIRON", "INIT-EXE", "INIT-FDS", "INIT-MEM"} {
		if strings.Contains(r.stdout, bad) {
			t.Errorf("%s readable: init is dumpable", bad)
		}
	}
}

func exitStatuses(t *testing.T, b *box) {
	cases := []struct {
		args   []string
		script string
		code   int
		stderr string
	}{
		{nil, `exit 7`, 7, ""},
		{nil, `kill -TERM $$`, 143, ""},
		{nil, `kill -KILL $$`, 137, ""},
		{[]string{"--", "/nonexistent/cmd"}, "", 125, "not found"},
		{[]string{"--", "definitely-not-a-command-xyz"}, "", 125, "not found"},
		{[]string{"--", "/usr"}, "", 125, "directory"},
		{[]string{"--no-such-flag"}, "", 125, "no-such-flag"},
	}
	for _, c := range cases {
		r := run(b.command(b.repo, c.args, c.script))
		if r.code != c.code {
			t.Errorf("%v %q: exit %d, want %d\n%s", c.args, c.script, r.code, c.code, r)
			continue
		}
		if c.stderr != "" {
			lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
			if len(lines) != 1 || !strings.Contains(lines[0], c.stderr) || strings.Contains(r.stderr, "goroutine") {
				t.Errorf("%v: stderr %q, want one line naming %q", c.args, r.stderr, c.stderr)
			}
		}
	}
}

func signalsForwarded(t *testing.T, b *box) {
	for _, sig := range []struct {
		name string
		num  os.Signal
	}{{"TERM", sigTERM}, {"INT", sigINT}, {"HUP", sigHUP}, {"USR1", sigUSR1}, {"QUIT", sigQUIT}} {
		ready := filepath.Join(b.repo, "ready-"+sig.name)
		got := filepath.Join(b.repo, "got-"+sig.name)
		script := fmt.Sprintf(`trap 'echo %[1]s > %[3]s; exit 3' %[1]s; touch %[2]s; while :; do sleep 0.05; done`, sig.name, ready, got)
		cmd := b.command(b.repo, nil, script)
		res := make(chan result, 1)
		if err := startAndCollect(cmd, res); err != nil {
			t.Fatal(err)
		}
		if !waitFor(func() bool { return exists(ready) }) {
			_ = cmd.Process.Kill()
			t.Fatalf("%s: command never started: %s", sig.name, <-res)
		}
		_ = cmd.Process.Signal(sig.num)
		r := <-res
		if r.code != 3 || readFileOr(got) != sig.name+"\n" {
			t.Errorf("SIG%s not delivered once to the command: %s (marker %q)", sig.name, r, readFileOr(got))
		}
	}
}

func diesWithLauncher(t *testing.T, b *box) {
	marker := "agentbox-orphan-" + filepath.Base(b.home)
	ready := filepath.Join(b.repo, "ready")
	cmd := b.command(b.repo, nil, fmt.Sprintf(`bash -c 'exec -a %[1]s sleep 300' & setsid bash -c 'exec -a %[1]s sleep 300' & touch %[2]s; wait`, marker, ready))
	res := make(chan result, 1)
	if err := startAndCollect(cmd, res); err != nil {
		t.Fatal(err)
	}
	if !waitFor(func() bool { return exists(ready) && len(pgrep(marker)) == 2 }) {
		_ = cmd.Process.Kill()
		t.Fatalf("sandboxed sleepers never started: %s", <-res)
	}
	_ = cmd.Process.Kill() // SIGKILL: no cleanup runs in the launcher
	<-res
	if !sandboxtest.WaitForUpTo(sandboxtest.GoneBound, func() bool { return len(pgrep(marker)) == 0 }) {
		t.Fatalf("sandboxed processes outlived the launcher: %v", pgrep(marker))
	}
}

// nothingRunsAfter: the command leaves processes behind, in the background and in a
// new session; when agentbox exec exits they are gone already (checked at once, not
// waited for). Output goes to a file: a pipe's reader would wait for its last writer
// anyway. (The Go API's own test, where the caller lives on, is in sandbox.)
func nothingRunsAfter(t *testing.T, b *box) {
	marker := "agentbox-leftover-" + filepath.Base(b.home)
	cmd := b.command(b.repo, nil, sandboxtest.Leftovers(marker, 2)+"exit 4")
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	err = cmd.Run()
	left := pgrep(marker)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 4 {
		b, _ := os.ReadFile(out.Name())
		t.Fatalf("agentbox exec: %v, want the command's status 4\n%s", err, b)
	}
	if len(left) != 0 {
		t.Errorf("processes of the session still run after agentbox exited: %v", left)
	}
}

func workdir(t *testing.T, b *box) {
	sub := filepath.Join(b.repo, "a", "b")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	testenv.Chown(t, b.repo)
	if r := run(b.command(sub, nil, `pwd`)); r.code != 0 || strings.TrimSpace(r.stdout) != sub {
		t.Fatalf("cwd inside repo: %s", r)
	}
	// From a directory inside the work tree, the default repo is the Git top level.
	if r := run(b.command(sub, nil, `touch "$REPO/top-ok"`)); r.code != 0 || !exists(filepath.Join(b.repo, "top-ok")) {
		t.Fatalf("default repo is not the Git top level: %s", r)
	}
	// From outside the repo, the working directory is the repo root.
	if r := run(b.command(b.home, []string{"--repo", b.repo}, `pwd`)); r.code != 0 || strings.TrimSpace(r.stdout) != b.repo {
		t.Fatalf("cwd outside repo: %s", r)
	}
}

func badRepos(t *testing.T, b *box) {
	file := filepath.Join(b.repo, "README")
	cases := []struct{ repo, why string }{
		{filepath.Join(b.home, "missing"), "does not exist"},
		{file, "not a directory"},
		{"/", "root directory"},
		{b.home, "is " + b.home},
		{filepath.Dir(b.home), "contains " + b.home},
		{"/tmp", "is /tmp"},
		{"/run", "is /run"},
		{"/proc", "is /proc"},
		{"/dev", "is /dev"},
		{"/proc/self", "pseudo-filesystem"},
	}
	for _, c := range cases {
		r := run(b.command(b.repo, []string{"--repo", c.repo}, `touch /tmp/should-not-run`))
		lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
		if r.code != 125 || len(lines) != 1 || !strings.Contains(lines[0], c.why) {
			t.Errorf("--repo %s: want 125 and one line with %q, got %s", c.repo, c.why, r)
		}
	}
}

// pid1Init: PID 1 is the raw init (a clone of the launcher: its argv) where this build
// and kernel run it (nsinit.RawInitAvailable; never under -race), else agentbox's Go
// init: a raw init that quietly fell back, or a Go init where the raw one should run,
// fails here. Either holds no signal handler (docs/security.md, "PID 1 and the audit").
func pid1Init(t *testing.T, b *box) {
	out := b.ok(`tr '\0' '\n' </proc/1/cmdline | head -n 1; grep SigCgt /proc/1/status`)
	want := "agentbox-init"
	if b.backend == "native" && nsinit.RawInitAvailable() { // not sandboxtest.NativeGo
		want = b.bin
	}
	if got, _, _ := strings.Cut(out, "\n"); got != want {
		t.Errorf("PID 1's argv[0] is %q, want %q (raw init available: %v)", got, want, nsinit.RawInitAvailable())
	}
	if !strings.Contains(out, "SigCgt:\t0000000000000000\n") {
		t.Errorf("PID 1 catches signals:\n%s", out)
	}
}
