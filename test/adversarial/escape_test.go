package adversarial

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/kernel"
	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// prelude defines try: `try NAME CMD...` announces an attempt and prints
// "ESCAPED NAME" when CMD succeeds. CMD is always the step that would change the host
// (a write, a create), so success is an escape whatever happened before it.
//
// `attempt NAME CMD...` is for a step whose success is allowed inside the sandbox
// (a write to the HOME overlay, a mount in a nested namespace): only the host
// snapshot after the session judges it.
const prelude = `try() { n=$1; shift; echo "TRY $n"; if ( "$@" ) >/dev/null 2>&1; then echo "ESCAPED $n"; fi; }
attempt() { n=$1; shift; echo "TRY $n"; ( "$@" ) >/dev/null 2>&1; true; }
`

// attack is one escape attempt, run from inside the sandbox as the unprivileged user.
type attack struct {
	name string
	// setup prepares the host before the session (optional); it may return extra
	// host paths whose checksums must not change.
	setup func(t *testing.T, x *target) []string
	args  []string // extra agentbox exec flags
	// script is the attack, run by /bin/sh with $REPO, $OUTSIDE, $VICTIM, $PROBE set;
	// it must end by printing DONE.
	script string
	// run replaces the plain launch (e.g. to pass fds or to learn the launcher PID);
	// nil launches the script as is.
	run func(t *testing.T, x *target, cmd *exec.Cmd) sandboxtest.Result
	// check looks at the session's output for what the host snapshot cannot see.
	check func(t *testing.T, x *target, r sandboxtest.Result)
	// replacesGit: the attack renames .git away, so the host's .git/hooks and
	// .git/config paths may change; check then judges what the operator's Git does.
	replacesGit bool
	// refused: agentbox must refuse to launch (exit 125, one line containing
	// refused); the host must be unchanged all the same.
	refused string
}

// attempts counts TRY lines and probe lines over the whole run, for the report.
var attempts atomic.Int64

var attacks = []attack{
	{name: "signal a host process", setup: func(t *testing.T, x *target) []string {
		sleeper := testenv.Command(t, x.Home, "sleep", "300")
		if err := sleeper.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() })
		x.env = append(x.env, fmt.Sprintf("HOSTPID=%d", sleeper.Process.Pid), fmt.Sprintf("TESTPID=%d", os.Getpid()))
		x.hostPID = sleeper.Process.Pid
		return nil
	}, script: `
		"$PROBE" kill "$HOSTPID" "$TESTPID"
		"$PROBE" byuid
		try kill-host-sleep kill -9 "$HOSTPID"
		echo "TRY kill-all"
		echo DONE
		exec /bin/kill -9 -1`,
		check: func(t *testing.T, x *target, r sandboxtest.Result) {
			if n := strings.Count(r.Stdout, ": ESRCH"); n != 2 {
				t.Errorf("kill of host PIDs: want ESRCH for both:\n%s", r.Stdout)
			}
			hostPrioritiesKept(t, x.hostPID, r)
			st := sandboxtest.ReadFileOr(fmt.Sprintf("/proc/%d/stat", x.hostPID))
			if _, rest, _ := strings.Cut(st, ") "); st == "" || strings.HasPrefix(rest, "Z") {
				t.Errorf("host process %d was killed from inside", x.hostPID)
			}
		}},

	{name: "abstract and run-dir sockets with --offline", args: []string{"--offline"}, setup: hostSockets,
		script: `
		"$PROBE" abstract "$ABSTRACT"
		echo "TRY run-socket"
		if [ -e "$RUNSOCK" ]; then echo "ESCAPED run-socket visible"; fi
		try run-socket-connect perl -MIO::Socket::UNIX -e 'IO::Socket::UNIX->new(Peer => $ENV{RUNSOCK}) or exit 1'
		echo DONE`,
		check: func(t *testing.T, x *target, r sandboxtest.Result) {
			if !strings.Contains(r.Stdout, "unreachable") || strings.Contains(r.Stdout, "CONNECTED") {
				t.Errorf("host abstract socket reachable with --offline:\n%s", r.Stdout)
			}
		}},

	// Without --offline the sandbox shares the host's network namespace, and
	// abstract Unix sockets belong to it, not to the file system: the host's X11
	// socket (@/tmp/.X11-unix/X0 types into every window of the operator's), D-Bus
	// buses and other control sockets. Where the kernel has Landlock ABI 6 (Linux
	// 6.12), the command's domain is scoped against them (P4), while the session's
	// own abstract sockets keep working; on older kernels they stay reachable
	// (documented in the README's threat section). /run sockets stay hidden either way.
	{name: "host abstract sockets without --offline", setup: hostSockets,
		script: `
		"$PROBE" abstract "$ABSTRACT"
		echo "TRY run-socket"
		if [ -e "$RUNSOCK" ]; then echo "ESCAPED run-socket visible"; fi
		# $$ is 2 in every sandbox: sessions sharing the host's network namespace
		# would race for one name.
		inner=agentbox-inner-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')
		# Connected once the listener is up, however long socat takes to start
		# on a loaded machine (bounded).
		socat ABSTRACT-LISTEN:$inner SYSTEM:'echo INNER-REACHED' &
		i=0; until socat - ABSTRACT-CONNECT:$inner </dev/null 2>/dev/null; do
			i=$((i+1)); [ $i -lt 600 ] || break; sleep 0.1
		done
		echo DONE`,
		check: func(t *testing.T, x *target, r sandboxtest.Result) {
			if !strings.Contains(r.Stdout, "INNER-REACHED") {
				t.Errorf("the session's own abstract socket is unreachable from inside:\n%s", r.Stdout)
			}
			reached := strings.Contains(r.Stdout, "CONNECTED \"agentbox-host\"")
			if scoped := kernel.CanScopeAbstractUnix(); scoped && reached {
				t.Errorf("the host's abstract socket is reachable, though this kernel has Landlock ABI %d (scoped from 6):\n%s", kernel.LandlockABI(), r.Stdout)
			} else if !scoped && !reached {
				t.Errorf("without Landlock ABI 6 the host's abstract socket should be reachable (README):\n%s", r.Stdout)
			}
		}},

	// A host daemon's path socket outside /tmp and /run (LXD's below /var/snap,
	// incus's and databases' below /var/lib) is a host process, often root's, and a
	// read-only mount does not stop connect(2): the plan masks every socket bound
	// on the host that the sandbox would see, with --offline too.
	{name: "host daemon socket outside /run", setup: hostDaemonSocket, script: `
		try host-daemon-socket sh -c 'socat -u UNIX-CONNECT:"$DSOCK" - | grep -q agentbox-host'
		echo DONE`},
	// A daemon that binds through a symlink (/var/run/docker.sock, the /run link
	// every distribution keeps; a link to a directory elsewhere): its path in
	// /proc/net/unix has a link in it, which no backend mounts on. A mask there
	// failed every launch while the socket was bound (anyone's, if connectable);
	// the plan masks the resolved path (or leaves it to the private /run).
	{name: "host daemon sockets bound through symlinks", setup: hostDaemonSocketsThroughLinks, script: `
		try var-run-socket sh -c 'socat -u UNIX-CONNECT:"$VARRUNSOCK" - | grep -q agentbox-host'
		try linked-dir-socket sh -c 'socat -u UNIX-CONNECT:"$LINKSOCK" - | grep -q agentbox-host'
		try linked-dir-socket-resolved sh -c 'socat -u UNIX-CONNECT:"$REALSOCK" - | grep -q agentbox-host'
		echo DONE`},
	{name: "host daemon socket outside /run with --offline", setup: hostDaemonSocket, args: []string{"--offline"}, script: `
		try host-daemon-socket sh -c 'socat -u UNIX-CONNECT:"$DSOCK" - | grep -q agentbox-host'
		echo DONE`},

	// The user's global Git config kept in the repository (a dotfiles repo, with
	// ~/.gitconfig a link into it, as stow makes it): written inside, every Git
	// the operator runs meanwhile would run the session's program, long before the
	// post-session audit. It is read-only inside, like .git/config.
	{name: "global git config linked into the repo", setup: func(t *testing.T, x *target) []string {
		cfg := filepath.Join(x.Repo, "dotgitconfig")
		sandboxtest.WriteFile(t, cfg, "[user]\n\tname = me\n")
		mustSymlink(t, cfg, filepath.Join(x.Home, ".gitconfig"))
		testenv.Chown(t, x.Home)
		return []string{cfg}
	}, script: `
		try global-config-in-repo sh -c 'printf "[core]\n\tfsmonitor = touch %s/global\n" "$PWNED" >> "$REPO/dotgitconfig"'
		try global-config-by-git git config --global core.fsmonitor "touch $PWNED/global-git"
		try global-config-replaced sh -c 'printf "[core]\n\tfsmonitor = touch %s/global\n" "$PWNED" > "$REPO/new" && mv "$REPO/new" "$REPO/dotgitconfig"'
		echo DONE`},

	// A plain --keep of an agent's directory gets the preset's read-only and
	// private directories too: what Claude Code loads or runs later as the operator
	// (plugins, skills, agents, commands, hooks, its local install) must not be
	// writable because the user typed --keep ~/.claude instead of --keep-agent claude.
	{name: "plain --keep of ~/.claude: the agent's exec surface", setup: func(t *testing.T, x *target) []string {
		for _, d := range []string{"plugins", "skills/s", "agents", "commands", "hooks", "local", "shell-snapshots", "session-env", "backups"} {
			mkUserDir(t, filepath.Join(x.Home, ".claude", d))
		}
		sandboxtest.WriteFile(t, filepath.Join(x.Home, ".claude/skills/s/SKILL.md"), "---\nname: s\n---\n")
		testenv.Chown(t, x.Home)
		return nil
	}, args: []string{"--keep", "~/.claude"}, script: `
		try plugin sh -c 'mkdir "$HOME/.claude/plugins/evil"'
		try skill sh -c 'echo "hooks: pwned" >> "$HOME/.claude/skills/s/SKILL.md"'
		try agent sh -c 'echo x > "$HOME/.claude/agents/evil.md"'
		try command sh -c 'echo x > "$HOME/.claude/commands/evil.md"'
		try hook-script sh -c 'echo x > "$HOME/.claude/hooks/stop.sh"'
		try local-install sh -c 'echo x > "$HOME/.claude/local/claude"'
		attempt shell-snapshot sh -c 'echo x > "$HOME/.claude/shell-snapshots/snapshot-bash.sh"'
		attempt session-env sh -c 'echo x > "$HOME/.claude/session-env/env.sh"'
		echo DONE`},

	{name: "agentbox binary inside the writable repo", setup: func(t *testing.T, x *target) []string {
		inRepo := filepath.Join(x.Repo, "agentbox")
		if err := copyFile(x.Bin, inRepo, 0o755); err != nil {
			t.Fatal(err)
		}
		testenv.Chown(t, inRepo)
		return []string{inRepo}
	}, script: `
		"$PROBE" exe "$REPO/agentbox"
		try truncate-running-binary sh -c ': > "$REPO/agentbox"'
		try dd-into-running-binary sh -c 'printf pwned | dd of="$REPO/agentbox" conv=notrunc 2>/dev/null'
		echo DONE`,
		run: func(t *testing.T, x *target, cmd *exec.Cmd) sandboxtest.Result {
			inRepo := filepath.Join(x.Repo, "agentbox")
			cmd.Path, cmd.Args[0] = inRepo, inRepo
			return sandboxtest.Run(cmd)
		}},

	{name: "symlink in the repo to a host path", setup: func(t *testing.T, x *target) []string {
		mustSymlink(t, x.Outside, filepath.Join(x.Repo, "out-dir"))
		mustSymlink(t, x.Victim, filepath.Join(x.Repo, "out-file"))
		mustSymlink(t, filepath.Join(x.Home, ".profile"), filepath.Join(x.Repo, "home-file"))
		testenv.Chown(t, x.Repo)
		return nil
	}, script: `
		try append-through-file-link sh -c 'echo x >> out-file'
		try create-through-dir-link touch out-dir/created
		attempt append-home-link-overlay sh -c 'echo x >> home-file'
		ln -s "$OUTSIDE" new-link 2>/dev/null
		try create-through-new-link touch new-link/created2
		ln -s /etc new-etc 2>/dev/null
		try create-etc-through-link touch new-etc/agentbox-escape
		try relative-dotdot-link sh -c 'ln -s ../../../../../../../.. up && touch "up$OUTSIDE/created3"'
		echo DONE`},

	{name: "hard link to a host file", script: `
		try hardlink-outside-into-repo sh -c 'ln "$VICTIM" hl && echo x >> hl'
		try hardlink-outside-into-home sh -c 'ln "$VICTIM" ~/hl2 && echo x >> ~/hl2'
		try hardlink-etc-into-repo sh -c 'ln /etc/hostname hl3 && echo x >> hl3'
		try hardlink-config-into-repo sh -c 'ln .git/config cfg-link && echo "[core] fsmonitor = touch /tmp/x" >> cfg-link'
		try hardlink-hook-sample sh -c 'ln .git/hooks/post-commit.sample hk && echo evil >> hk'
		echo DONE`},

	{name: "proc self root, proc 1 root, proc 1 cwd", script: `
		try self-root-append sh -c 'echo x >> "/proc/self/root$VICTIM"'
		try self-root-create touch "/proc/self/root$OUTSIDE/created"
		try pid1-root-append sh -c 'echo x >> "/proc/1/root$VICTIM"'
		try pid1-root-create touch "/proc/1/root$OUTSIDE/created"
		attempt pid1-cwd-create sh -c 'touch /proc/1/cwd/agentbox-escape'
				try pid1-root-config sh -c 'echo x >> "/proc/1/root$REPO/.git/config"'
		try pid1-root-hook touch "/proc/1/root$REPO/.git/hooks/pre-commit"
		echo DONE`},

	{name: "proc of the launcher pid invisible", script: `
		until [ -s launcher-pid ]; do sleep 0.02; done
		pid=$(cat launcher-pid)
		echo "TRY launcher-visible"
		if [ -e /proc/$pid ]; then echo "VISIBLE $pid"; fi
		try launcher-root-append sh -c "echo x >> /proc/$pid/root$VICTIM"
		try launcher-cwd-create touch /proc/$pid/cwd/agentbox-escape
		try launcher-fd-list sh -c "ls /proc/$pid/fd | grep -q ."
		echo "PIDS $(ls /proc | grep '^[0-9]' | tr '\n' ' ')"
		echo DONE`,
		run: func(t *testing.T, x *target, cmd *exec.Cmd) sandboxtest.Result {
			res := make(chan sandboxtest.Result, 1)
			if err := sandboxtest.StartAndCollect(cmd, res); err != nil {
				t.Fatal(err)
			}
			pidFile := filepath.Join(x.Repo, "launcher-pid")
			sandboxtest.WriteFile(t, pidFile+".tmp", strconv.Itoa(cmd.Process.Pid))
			testenv.Chown(t, pidFile+".tmp")
			if err := os.Rename(pidFile+".tmp", pidFile); err != nil {
				t.Fatal(err)
			}
			return <-res
		},
		check: func(t *testing.T, x *target, r sandboxtest.Result) {
			if strings.Contains(r.Stdout, "VISIBLE") {
				t.Errorf("launcher PID visible inside:\n%s", r.Stdout)
			}
			for _, l := range strings.Split(r.Stdout, "\n") {
				if pids, ok := strings.CutPrefix(l, "PIDS "); ok {
					for _, p := range strings.Fields(pids) {
						if n, _ := strconv.Atoi(p); n > 100 {
							t.Errorf("host-looking PID %s visible inside: %s", p, pids)
						}
					}
				}
			}
		}},

	{name: "proc self fd of inherited fds", script: `
		"$PROBE" fds
		echo DONE`,
		run: func(t *testing.T, x *target, cmd *exec.Cmd) sandboxtest.Result {
			dir, err := os.Open(x.Outside)
			if err != nil {
				t.Fatal(err)
			}
			defer dir.Close()
			f, err := os.Open(x.Victim)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			hooks, err := os.Open(filepath.Join(x.Repo, ".git/hooks"))
			if err != nil {
				t.Fatal(err)
			}
			defer hooks.Close()
			cmd.ExtraFiles = []*os.File{dir, f, hooks}
			return sandboxtest.Run(cmd)
		}},

	{name: "remount or unmount read-only mounts", script: `
		try remount-root-rw sh -c 'mount -o remount,rw / && touch "$OUTSIDE/created"'
		try remount-bind-root-rw sh -c 'mount -o remount,bind,rw / && touch "$OUTSIDE/created"'
		try remount-config-rw sh -c 'mount -o remount,bind,rw .git/config && echo x >> .git/config'
		try umount-config sh -c 'umount .git/config; umount -l .git/config; echo x >> .git/config'
		try umount-hooks sh -c 'umount -l .git/hooks; touch .git/hooks/pre-commit'
		attempt umount-home-write-overlay sh -c 'umount -l "$HOME"; touch "$HOME/agentbox-escape"'
		try umount-root sh -c 'umount -l /; touch "$OUTSIDE/created"'
		try remount-proc-sys sh -c 'mount -o remount,rw /proc/sys && echo 1 > /proc/sys/kernel/sysrq'
		echo DONE`},

	{name: "nested user and mount namespace", script: `
		unshare -Urm true 2>/dev/null && echo NESTED-USERNS-ALLOWED
		try nested-remount-root sh -c 'unshare -Urm sh -c "mount -o remount,rw / && touch \"$OUTSIDE/created\""'
		try nested-remount-config sh -c 'unshare -Urm sh -c "mount -o remount,bind,rw .git/config && echo x >> .git/config"'
		try nested-umount-config sh -c 'unshare -Urm sh -c "umount -l .git/config; echo x >> .git/config"'
		try nested-umount-hooks sh -c 'unshare -Urm sh -c "umount -l .git/hooks; touch .git/hooks/pre-commit"'
		attempt nested-umount-home-write-overlay sh -c 'unshare -Urm sh -c "umount -l \"$HOME\"; touch \"$HOME/.agentbox-escape\""'
		try nested-new-tmpfs-over-outside sh -c 'unshare -Urm sh -c "mount -t tmpfs t \"$OUTSIDE\" && umount \"$OUTSIDE\" && touch \"$OUTSIDE/created\""'
		try nested-mount-setattr-proc sh -c 'unshare -Urm sh -c "mount -t proc proc /proc && echo x >> \"/proc/1/root$VICTIM\""'
		echo DONE`},

	{name: "mount --bind over the repo", script: `
		try bind-outside-over-repo sh -c 'unshare -Urm sh -c "mount --bind \"$OUTSIDE\" \"$REPO\" && touch \"$REPO/created\""'
		try rbind-outside-over-repo sh -c 'unshare -Urm sh -c "mount --rbind \"$OUTSIDE\" \"$REPO\" && echo x >> \"$REPO/victim\""'
		try bind-repo-over-hooks sh -c 'unshare -Urm sh -c "mount --bind \"$REPO\" \"$REPO/.git/hooks\" && touch \"$REPO/.git/hooks/pre-commit\" && test -e \"$REPO/pre-commit\" && false"'
		try bind-tmp-over-config sh -c 'unshare -Urm sh -c "echo evil > /tmp/cfg && mount --bind /tmp/cfg \"$REPO/.git/config\" && grep -q evil \"$REPO/.git/config\" && false"'
		unshare -Urm sh -c 'mount --bind "$REPO" "$OUTSIDE" && touch "$OUTSIDE/landed-in-repo"' 2>/dev/null
		echo DONE`},

	{name: "pivot_root and chroot in a nested user namespace", script: `
		try chroot-dotdot perl -e '
			mkdir "/tmp/jail"; chroot("/tmp/jail") or die;
			chdir("..") for 1..64; chroot(".") or die;
			open(my $f, ">>", $ENV{VICTIM}) or die; print $f "x"; close($f) or die'
		try nested-chroot-dotdot sh -c 'unshare -Urm perl -e "
			mkdir q{/tmp/jail2}; chroot(q{/tmp/jail2}) or die;
			chdir(q{..}) for 1..64; chroot(q{.}) or die;
			open(my \$f, q{>>}, \$ENV{VICTIM}) or die; print \$f q{x}; close(\$f) or die"'
		try nested-pivot-root sh -c 'unshare -Urm sh -c "
			mkdir -p /tmp/nr/old && mount -t tmpfs t /tmp/nr && mkdir -p /tmp/nr/old &&
			cd /tmp/nr && pivot_root . old && cd / &&
			umount -l /old 2>/dev/null; mount -o remount,rw /old 2>/dev/null;
			echo x >> \"/old$VICTIM\""'
		try nested-pivot-root-keep sh -c 'unshare -Urm sh -c "
			mount --rbind / /tmp && cd /tmp && pivot_root . tmp 2>/dev/null;
			touch \"$OUTSIDE/created\""'
		echo DONE`},

	{name: "open_by_handle_at", script: `
		"$PROBE" handle "$VICTIM" "$REPO/.git/config" "$REPO/README"
		echo DONE`, run: probeRun("handle")},

	{name: "rewrite the agentbox binary through proc 1 exe", script: `
		"$PROBE" exe
		try cp-over-proc1-exe sh -c 'cp /bin/true /proc/1/exe'
		echo DONE`, run: probeRun("exe")},

	{name: "ptrace PID 1", script: `
		"$PROBE" ptrace 1
		try gdb-attach-1 sh -c 'command -v gdb >/dev/null && gdb -p 1 -batch -ex "call (int)getpid()" 2>&1 | grep -q "\$1 ="'
		echo DONE`, run: probeRun("ptrace")},

	{name: "Git exec surface: hooks, config, hooksPath, fsmonitor, includes", setup: func(t *testing.T, x *target) []string {
		// The operator's config includes two files in the work tree: the include
		// targets are part of the exec surface (P7) and must be read-only too.
		cfg := filepath.Join(x.Repo, ".git/config")
		f, err := os.OpenFile(cfg, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(f, "[include]\n\tpath = ../shared.gitconfig\n[includeIf \"onbranch:main\"]\n\tpath = ../branch.gitconfig\n")
		f.Close()
		sandboxtest.WriteFile(t, filepath.Join(x.Repo, "shared.gitconfig"), "[user]\n\tname = t\n")
		testenv.Chown(t, x.Repo)
		return []string{filepath.Join(x.Repo, "shared.gitconfig")}
	}, script: `
		try hook-create sh -c 'printf "#!/bin/sh\ntouch /tmp/pwned\n" > .git/hooks/pre-commit'
		try hook-replace-sample sh -c 'echo evil > .git/hooks/post-commit.sample'
		try hook-rename sh -c 'mv .git/hooks/post-commit.sample .git/hooks/post-commit'
		try hooks-dir-remove sh -c 'rm -rf .git/hooks && mkdir .git/hooks && touch .git/hooks/pre-commit'
		try hooks-dir-rename sh -c 'mv .git/hooks .git/hooks.old && mkdir .git/hooks && touch .git/hooks/pre-commit'
		try config-append sh -c 'echo "[core]" >> .git/config'
		try config-rename sh -c 'mv .git/config .git/config.old && echo "[core] fsmonitor = true" > .git/config'
		try config-remove sh -c 'rm -f .git/config && echo "[core]" > .git/config'
		try git-config-hookspath git config core.hooksPath .githooks
		try git-config-fsmonitor git config core.fsmonitor "touch /tmp/pwned"
		try git-config-sshcommand git config core.sshCommand "touch /tmp/pwned"
		try git-config-includeif git config --add "includeIf.onbranch:main.path" ../evil.gitconfig
		try git-config-include git config --add include.path ../evil.gitconfig
		try include-target-write sh -c 'echo "[core] fsmonitor = touch /tmp/pwned" >> shared.gitconfig'
		try include-target-replace sh -c 'rm -f shared.gitconfig && echo "[core] fsmonitor = touch /tmp/pwned" > shared.gitconfig'
		try includeif-target-create sh -c 'echo "[core] fsmonitor = touch /tmp/pwned" > branch.gitconfig'
		try config-worktree sh -c 'git config extensions.worktreeConfig true && git config --worktree core.fsmonitor "touch /tmp/pwned"'
		echo DONE`,
		check: func(t *testing.T, x *target, r sandboxtest.Result) {
			// A missing include target gets an empty read-only placeholder (P7).
			if s := sandboxtest.ReadFileOr(filepath.Join(x.Repo, "branch.gitconfig")); s != "" {
				t.Errorf("includeIf target written: %q", s)
			}
			operatorGitRunsNothing(t, x)
		}},

	// Users point .git/hooks at a shared hooks directory and .git/config at their
	// dotfiles. The targets lie outside the repo, so they are read-only anyway; the
	// links themselves sit in the writable .git and must not be replaceable.
	{name: "symlinked .git hooks and .git config replaced from inside", setup: func(t *testing.T, x *target) []string {
		shared := filepath.Join(x.Outside, "shared-hooks")
		mkUserDir(t, shared)
		hooks := filepath.Join(x.Repo, ".git/hooks")
		if err := os.RemoveAll(hooks); err != nil {
			t.Fatal(err)
		}
		mustSymlink(t, shared, hooks)
		cfg := filepath.Join(x.Repo, ".git/config")
		dotfile := filepath.Join(x.Outside, "repo.gitconfig")
		if err := os.Rename(cfg, dotfile); err != nil {
			t.Fatal(err)
		}
		mustSymlink(t, dotfile, cfg)
		testenv.Chown(t, x.Outside)
		testenv.Chown(t, x.Repo)
		return nil
	}, script: `
		try replace-hooks-link sh -c 'rm .git/hooks && mkdir .git/hooks &&
			printf "#!/bin/sh\ntouch %s/hook\n" "$PWNED" > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit'
		try replace-config-link sh -c 'cp .git/config .git/config.new && rm .git/config &&
			printf "[core]\n\tfsmonitor = touch %s/fsmonitor\n" "$PWNED" >> .git/config.new && mv .git/config.new .git/config'
		echo DONE`,
		// A link cannot be kept from being replaced inside the writable repository:
		// agentbox refuses to launch rather than protect only the link's target.
		refused: "is a symlink",
		check:   func(t *testing.T, x *target, r sandboxtest.Result) { operatorGitRunsNothing(t, x) }},

	// The rest of .git must stay writable, so the protected paths can be renamed
	// away with their parent: P7 leaves this to the host-side audit after the
	// session. The check is what matters to the operator: their Git, on the host,
	// afterwards, runs no program the sandbox planted.
	{name: "replace .git wholesale: renamed directory, gitdir file", replacesGit: true, script: `
		payload='[core]
	fsmonitor = touch '"$PWNED"'/fsmonitor
	hooksPath = '"$REPO"'/planted-hooks
	sshCommand = touch '"$PWNED"'/ssh
[alias]
	st = !touch '"$PWNED"'/alias'
		export payload
		mkdir -p planted-hooks && printf '#!/bin/sh\ntouch %s/hook\n' "$PWNED" > planted-hooks/pre-commit && chmod +x planted-hooks/pre-commit
		attempt git-dir-rename-swap sh -c 'cp -r .git .git.new && echo "$payload" > .git.new/config &&
			printf "#!/bin/sh\ntouch %s/hook2\n" "$PWNED" > .git.new/hooks/pre-commit && chmod +x .git.new/hooks/pre-commit &&
			mv .git .git.old && mv .git.new .git'
		attempt gitdir-file-redirect sh -c 'cp -r .git .git.evil && echo "$payload" > .git.evil/config &&
			mkdir -p sub && cd sub && git init -q && rm -rf .git && echo "gitdir: ../.git.evil" > .git'
		echo DONE`,
		check: func(t *testing.T, x *target, r sandboxtest.Result) {
			operatorGitRunsNothing(t, x)
			operatorGitRunsNothingIn(t, x, filepath.Join(x.Repo, "sub"))
		}},
}

// operatorGitRunsNothing runs the operator's everyday Git commands on the host after
// the session and fails if any planted program ran (it would create a file in $PWNED).
func operatorGitRunsNothing(t *testing.T, x *target) {
	t.Helper()
	operatorGitRunsNothingIn(t, x, x.Repo)
}

func operatorGitRunsNothingIn(t *testing.T, x *target, dir string) {
	t.Helper()
	if !sandboxtest.Exists(dir) {
		t.Errorf("%s vanished: the operator's Git could not be checked there", dir)
		return
	}
	for _, args := range [][]string{{"status"}, {"st"}, {"commit", "-q", "--allow-empty", "-m", "operator"}, {"fetch", "-q", "ssh://example.invalid/x"}} {
		cmd := testenv.Command(t, x.Home, "git", args...)
		cmd.Dir = dir
		cmd.Env = append(cmd.Env, "GIT_AUTHOR_NAME=o", "GIT_AUTHOR_EMAIL=o@example.invalid",
			"GIT_COMMITTER_NAME=o", "GIT_COMMITTER_EMAIL=o@example.invalid", "GIT_CONFIG_NOSYSTEM=1")
		_, _ = cmd.CombinedOutput() // failing commands are fine; running a payload is not
	}
	if ents, _ := os.ReadDir(x.Pwned); len(ents) > 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("the operator's Git on the host ran planted programs: %v", names)
	}
}

// hostSockets listens on an abstract unix socket and on a socket below the host's
// /run, each greeting whoever connects with "agentbox-host".
func hostSockets(t *testing.T, x *target) []string {
	name := "agentbox-adversarial-" + filepath.Base(x.Home)
	runSock := filepath.Join("/run", name+".sock")
	if os.Geteuid() != 0 {
		runSock = filepath.Join(os.Getenv("XDG_RUNTIME_DIR"), name+".sock")
	}
	for _, addr := range []string{"@" + name, runSock} {
		testenv.ServeUnix(t, addr, "agentbox-host")
	}
	x.env = append(x.env, "ABSTRACT="+name, "RUNSOCK="+runSock)
	return nil
}

// hostDaemonSocket listens, as the test (root, like a system daemon), on a socket
// below the outside directory, mode 0777, answering "agentbox-host".
func hostDaemonSocket(t *testing.T, x *target) []string {
	sock := filepath.Join(x.Outside, "daemon.sock")
	testenv.ServeUnix(t, sock, "agentbox-host")
	x.env = append(x.env, "DSOCK="+sock)
	return nil
}

// hostDaemonSocketsThroughLinks listens, as hostDaemonSocket does, on a socket bound
// through /var/run and on one bound through a symlink to a directory outside /run.
func hostDaemonSocketsThroughLinks(t *testing.T, x *target) []string {
	if fi, err := os.Lstat("/var/run"); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Skip("/var/run is no symlink here")
	}
	if os.Geteuid() != 0 {
		t.Skip("binds below /var/run as a system daemon: needs root")
	}
	real := filepath.Join(x.Outside, "real")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	mustSymlink(t, real, filepath.Join(x.Outside, "link"))
	varRun := filepath.Join("/var/run", "agentbox-adversarial-"+filepath.Base(x.Home)+".sock")
	linked := filepath.Join(x.Outside, "link", "daemon.sock")
	for _, sock := range []string{varRun, linked} {
		testenv.ServeUnix(t, sock, "agentbox-host")
	}
	x.env = append(x.env, "VARRUNSOCK="+varRun, "LINKSOCK="+linked, "REALSOCK="+filepath.Join(real, "daemon.sock"))
	return nil
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// probeRun launches the script as is; named for the probe it runs, for readability.
func probeRun(string) func(t *testing.T, x *target, cmd *exec.Cmd) sandboxtest.Result {
	return func(t *testing.T, x *target, cmd *exec.Cmd) sandboxtest.Result { return sandboxtest.Run(cmd) }
}

// TestEscapes runs every attack against every backend and checks the host after each.
func TestEscapes(t *testing.T) { runAttacks(t, attacks) }

// runAttacks runs the attacks against every backend and checks the host after each.
func runAttacks(t *testing.T, attacks []attack) { runAttacksOn(t, sandboxtest.Backends(t), attacks) }

// runAttacksOn runs the attacks against each of backends and checks the host after each.
func runAttacksOn(t *testing.T, backends []string, attacks []attack) {
	pr := probe(t)
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			for _, a := range attacks {
				t.Run(a.name, func(t *testing.T) {
					x := newTarget(t, backend)
					var extra []string
					if a.setup != nil {
						extra = a.setup(t, x)
					}
					if a.replacesGit {
						x.skipGit = true
					}
					before := x.snapshot(t)
					extraBefore := checksums(extra)
					cmd := x.Command(x.Repo, append(append([]string{"--no-git-save", "--no-record"}, a.args...), x.args...), prelude+a.script)
					cmd.Env = append(cmd.Env, "OUTSIDE="+x.Outside, "VICTIM="+x.Victim, "PROBE="+pr, "PWNED="+x.Pwned, probeEnv+"=1")
					cmd.Env = append(cmd.Env, x.env...)
					var r sandboxtest.Result
					if a.run != nil {
						r = a.run(t, x, cmd)
					} else {
						r = sandboxtest.Run(cmd)
					}
					countAttempts(r.Stdout)
					if a.refused != "" {
						attempts.Add(1)
						if r.Code != 125 || !strings.Contains(r.Stderr, a.refused) || strings.Count(strings.TrimSpace(r.Stderr), "\n") != 0 {
							t.Fatalf("launch not refused with one line naming %q:\n%s", a.refused, r)
						}
						x.unchanged(t, before)
						return
					}
					if r.Code != 0 || !strings.Contains(r.Stdout, "DONE") {
						t.Fatalf("attack script did not run to its end:\n%s", r)
					}
					if strings.Contains(r.Stdout, "ESCAPED") {
						t.Errorf("escape:\n%s", grepLines(r.Stdout, "ESCAPED"))
					}
					x.unchanged(t, before)
					if after := checksums(extra); strings.Join(after, "\n") != strings.Join(extraBefore, "\n") {
						t.Errorf("protected file changed: %v -> %v", extraBefore, after)
					}
					if a.check != nil {
						a.check(t, x, r)
					}
					if t.Failed() || testing.Verbose() {
						t.Logf("session output:\n%s", r)
					}
				})
			}
		})
	}
	t.Logf("escape attempts made: %d", attempts.Load())
}

func checksums(paths []string) []string {
	var out []string
	for _, p := range paths {
		out = append(out, p+" "+checksum(p))
	}
	return out
}

// countAttempts adds the session's attempts: TRY lines and probe result lines.
func countAttempts(out string) {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "TRY ") || strings.HasPrefix(l, "refused ") || strings.HasPrefix(l, "ESCAPED ") && !strings.Contains(out, "TRY "+strings.TrimPrefix(l, "ESCAPED ")) || strings.HasPrefix(l, "kill ") || strings.HasPrefix(l, "abstract ") {
			attempts.Add(1)
		}
	}
}

func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// hostPrioritiesKept checks that the user's host process pid kept its CPU and I/O
// priority through a session that set both for every process of its uid (the
// "byuid" probe): setpriority(PRIO_USER) and ioprio_set(IOPRIO_WHO_USER) reach
// processes by uid, not PID, and only the sandbox's PID namespace keeps them to the
// session's own. The probe's calls must have succeeded (on the sandbox's own
// processes), and the host process must be of the same uid, or the row proves
// nothing.
func hostPrioritiesKept(t *testing.T, pid int, r sandboxtest.Result) {
	t.Helper()
	for _, call := range []string{"setpriority PRIO_USER", "ioprio_set IOPRIO_WHO_USER"} {
		if !strings.Contains(r.Stdout, call) || !strings.Contains(grepLines(r.Stdout, call), ": <nil>") {
			t.Errorf("%s inside did not succeed on the session's own processes:\n%s", call, r.Stdout)
		}
	}
	if uid, err := procUID(pid); err != nil || uid != int(testenv.TestUser(t).UID) {
		t.Fatalf("host process %d: uid %d (%v), want the test user's: the probe's calls would not match it", pid, uid, err)
	}
	nice, err := unix.Getpriority(unix.PRIO_PROCESS, pid)
	if err != nil {
		t.Fatal(err)
	}
	// getpriority(2) returns 20 - nice.
	if nice != 20 {
		t.Errorf("host process %d has nice %d after the session, want 0: setpriority(PRIO_USER) inside reached it", pid, 20-nice)
	}
	const ioprioGet, whoProcess = unix.SYS_IOPRIO_GET, 1
	prio, _, e := unix.Syscall(ioprioGet, whoProcess, uintptr(pid), 0)
	if e != 0 {
		t.Fatal(e)
	}
	if class := prio >> 13; class == 3 {
		t.Errorf("host process %d is in the idle I/O class after the session: ioprio_set(IOPRIO_WHO_USER) inside reached it", pid)
	}
}

// procUID is the real uid of process pid.
func procUID(pid int) (int, error) {
	st := sandboxtest.ReadFileOr(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(st, "\n") {
		if rest, ok := strings.CutPrefix(l, "Uid:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				return strconv.Atoi(f[0])
			}
		}
	}
	return -1, fmt.Errorf("no Uid line in /proc/%d/status", pid)
}
