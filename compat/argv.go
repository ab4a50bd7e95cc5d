// Package compat is the bubblewrap backend: it translates the mount plan into bwrap
// options, one plan operation at a time, and runs bwrap with the same exit-status
// semantics as the native backend. It makes no policy decision: what is mounted, in
// which order, comes from build.Plan; an operation with no bwrap form is an error,
// never a silent skip. Which binary may run is bwrapcheck's decision.
//
// The translation is pure and builds on any OS; running bwrap is in run_linux.go.
package compat

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentbox/agentbox/bwrapcheck"
	"github.com/agentbox/agentbox/mounts"
)

// The descriptors Run passes to bwrap, named in Command's argv.
const (
	StatusFD  = 3 // bwrap writes its --json-status-fd reports here
	SeccompFD = 4 // bwrap reads the terminal-injection filter from here (--add-seccomp-fd)
	ControlFD = 5 // agentbox's init inside reaches the launcher here (passed through)
)

// InitPath is where the agentbox binary is bound, read-only, inside the sandbox, to
// run as its PID 1 (on the private /run, so it is there whatever the host path).
const InitPath = "/run/agentbox/init"

// Argv translates plan into bwrap's arguments, without the program name and the
// status descriptor (see Command). The order is: namespaces, lifetime and privilege
// options, the mount operations in plan order (bwrap applies them in argument order,
// so later mounts win, as in the plan), the working directory, "--", the command.
//
// An overlay's root takes the lower directory's permission bits (overlay.UpperFor),
// so Argv reads the overlay sources' owner and mode on the host.
func Argv(plan mounts.Plan) ([]string, error) {
	return flatten(groups(plan, hostLower, nil))
}

// Command returns the whole argv Run executes for plan with the bwrap at path:
// path, "--json-status-fd 3 --add-seccomp-fd 4", then Argv(plan).
func Command(path string, plan mounts.Plan) ([]string, error) {
	if err := requireDeviceIDs(plan); err != nil {
		return nil, err
	}
	return flatten(commandGroups(path, plan, hostLower, nil))
}

// requireDeviceIDs refuses a plan with a device operation that carries no identity
// (mounts.Op.SourceID): bwrap would bind whatever is at its path at launch, a node
// swapped in after the launcher's device rule judged the one it saw. (--dry-run
// shows a plan the launcher took no identities for; it runs nothing.)
func requireDeviceIDs(plan mounts.Plan) error {
	for i, op := range plan.Ops {
		if op.Kind == mounts.Device && op.SourceID == (mounts.FileID{}) {
			return fmt.Errorf("bwrap backend: plan operation %d (%s %s): the plan carries no identity for the device (the launcher checks each device before the launch); not launching", i+1, op.Kind, op.Dest)
		}
	}
	return nil
}

// flatten joins option groups into one argv.
func flatten(groups [][]string, err error) ([]string, error) {
	if err != nil {
		return nil, err
	}
	var argv []string
	for _, g := range groups {
		argv = append(argv, g...)
	}
	return argv, nil
}

func commandGroups(path string, plan mounts.Plan, lower lowerFunc, budget *Budget) ([][]string, error) {
	if err := checkString("bwrap path", path); err != nil {
		return nil, err
	}
	g, err := groups(plan, lower, budget)
	if err != nil {
		return nil, err
	}
	return append([][]string{
		{path},
		{"--json-status-fd", fmt.Sprint(StatusFD)},
		{"--add-seccomp-fd", fmt.Sprint(SeccompFD)},
	}, g...), nil
}

// groups is Argv with each option and its arguments kept together, for printing one
// option per line. With a budget (budget.go), the RAM-backed filesystems are its
// directories, which it collects, and "/" is the stage's copy; without one (bwrap
// run alone, as by the benchmarks), each tmpfs bwrap can size gets the whole TmpSize.
func groups(plan mounts.Plan, lower lowerFunc, budget *Budget) ([][]string, error) {
	// P5: user, mount (implied by any mount option), PID, IPC, UTS and cgroup always;
	// the network only with --offline. bwrap keeps the caller's uid and gid in the new
	// user namespace, as the native backend does.
	g := [][]string{
		{"--unshare-user"}, {"--unshare-ipc"}, {"--unshare-pid"}, {"--unshare-uts"}, {"--unshare-cgroup"},
	}
	if plan.Namespaces.Net {
		g = append(g, []string{"--unshare-net"})
	}
	// The native backend's invariants: the command dies with the launcher and runs
	// with no capabilities (bwrap drops them anyway for a non-root sandbox user; this
	// also covers a launcher running as root). bwrap always sets no_new_privs.
	g = append(g, []string{"--die-with-parent"}, []string{"--cap-drop", "ALL"})

	mounted := map[string]bool{}
	dev := ""
	for i, op := range plan.Ops {
		if op.Kind == mounts.ReadOnly && mounted[op.Dest] && op.Source == "" && op.Mode == 0 {
			// A mount point of this plan (the sandbox's /proc): bwrap remounts it;
			// a bind of the host's path would show the host's processes.
			g = append(g, []string{"--remount-ro", op.Dest})
			continue
		}
		mounted[op.Dest] = true
		opts, err := translateWith(op, lower, plan.TmpSize, budget)
		if err != nil {
			return nil, fmt.Errorf("bwrap backend: plan operation %d (%s %s): %w", i+1, op.Kind, op.Dest, err)
		}
		if op.Kind == mounts.Dev {
			dev = op.Dest
		}
		g = append(g, opts...)
	}
	if budget != nil && dev != "" {
		// bwrap's /dev is a tmpfs it makes writable and cannot size: read-only once
		// its nodes, devpts, shm and the handed-in devices are there (that mount
		// only, not those below it).
		g = append(g, []string{"--remount-ro", dev})
	}

	if err := checkPath("working directory", plan.Workdir); err != nil {
		return nil, fmt.Errorf("bwrap backend: %w", err)
	}
	g = append(g, []string{"--chdir", plan.Workdir})

	if len(plan.Command) == 0 {
		return nil, fmt.Errorf("bwrap backend: the plan has no command")
	}
	for i, a := range plan.Command {
		if err := checkString(fmt.Sprintf("command argument %d", i), a); err != nil {
			return nil, fmt.Errorf("bwrap backend: %w", err)
		}
	}
	return append(g, append([]string{"--"}, plan.Command...)), nil
}

// translateWith is translate, but the operations that draw on budget, when there is
// one, become its directories (budgetOpts).
func translateWith(op mounts.Op, lower lowerFunc, size int64, budget *Budget) ([][]string, error) {
	if budget != nil {
		if err := checkPath("destination", op.Dest); err != nil {
			return nil, err
		}
		if opts, ok, err := budgetOpts(op, lower, budget); ok || err != nil {
			return opts, err
		}
	}
	return translate(op, lower, size)
}

// translate returns the bwrap options for one operation. Every mounts.Kind has a
// case; one without is an error (a test walks mounts.Kinds). size is the plan's
// TmpSize, for a launch without the budget (bwrap run alone, as by the benchmarks):
// bwrap cannot share one tmpfs between mounts, so each tmpfs it can size
// (--size, only for --tmpfs) gets all of it; /dev itself and the overlay's upper
// layer are bwrap's own tmpfs mounts, which it gives no size.
func translate(op mounts.Op, lower lowerFunc, size int64) ([][]string, error) {
	if err := checkPath("destination", op.Dest); err != nil {
		return nil, err
	}
	switch op.Kind {
	case mounts.ReadOnly, mounts.Mask:
		if op.Source != "" || op.Mode != 0 {
			return nil, fmt.Errorf("has a source or mode, which %s does not take", op.Kind)
		}
		return coverOpts(op)
	}
	usesSource := op.Kind == mounts.BindRO || op.Kind == mounts.Bind || op.Kind == mounts.Overlay || op.Kind == mounts.Device
	if usesSource {
		if err := checkPath("source", op.Source); err != nil {
			return nil, err
		}
	} else if op.Source != "" {
		return nil, fmt.Errorf("has source %q, which %s does not take", op.Source, op.Kind)
	}
	if op.Kind != mounts.Tmpfs && op.Mode != 0 {
		return nil, fmt.Errorf("has mode %04o, which %s does not take", op.Mode, op.Kind)
	}

	switch op.Kind {
	case mounts.BindRO:
		if op.IfExists {
			// bwrap has no "try" for a destination: one gone now is left out (one
			// removed in the moments before bwrap mounts fails bwrap's setup, and
			// RunWith launches again).
			if _, err := os.Lstat(op.Dest); errors.Is(err, fs.ErrNotExist) {
				return nil, nil
			}
		}
		// bwrap binds recursively and makes every submount read-only too.
		return [][]string{{"--ro-bind", op.Source, op.Dest}}, nil
	case mounts.Bind:
		return [][]string{{"--bind", op.Source, op.Dest}}, nil
	case mounts.Tmpfs:
		if op.Mode&^0o7777 != 0 {
			return nil, fmt.Errorf("mode %o has bits beyond permissions", op.Mode)
		}
		// --perms modifies the next option; bwrap's own default would be 0755.
		return [][]string{append(sizeOpt(size), "--perms", fmt.Sprintf("%04o", op.Mode), "--tmpfs", op.Dest)}, nil
	case mounts.Overlay:
		// The lower layer is the host's Source; the upper is an invisible tmpfs that
		// disappears with the sandbox (needs bwrap >= 0.11, not setuid). bwrap makes
		// the upper dir, and so the merged root, 0755 and owned by the mounter; the
		// --chmod gives it the lower's mode as the native backend does.
		mode, err := lower(op.Source)
		if err != nil {
			return nil, err
		}
		return [][]string{
			{"--overlay-src", op.Source, "--tmp-overlay", op.Dest},
			{"--chmod", fmt.Sprintf("%04o", mode), op.Dest},
		}, nil
	case mounts.Device:
		// --dev-bind keeps device access on the bind (bwrap's other binds are
		// nodev); InitCommand turns its source into a descriptor Run opens.
		return [][]string{{"--dev-bind", op.Source, op.Dest}}, nil
	case mounts.Proc:
		return [][]string{{"--proc", op.Dest}}, nil
	case mounts.Dev:
		if size > 0 {
			// bwrap's /dev/shm is a directory of its /dev; a sized tmpfs over it
			// keeps what the command puts there within the budget.
			return [][]string{{"--dev", op.Dest}, append(sizeOpt(size), "--perms", "1777", "--tmpfs", filepath.Join(op.Dest, "shm"))}, nil
		}
		return [][]string{{"--dev", op.Dest}}, nil
	}
	return nil, fmt.Errorf("operation kind %q has no bwrap translation", op.Kind)
}

// sizeOpt is bwrap's --size for a tmpfs of size bytes (0: bwrap's default, none).
func sizeOpt(size int64) []string {
	if size <= 0 {
		return nil
	}
	return []string{"--size", fmt.Sprint(size)}
}

// coverOpts translates ReadOnly and Mask. bwrap binds only host paths and has no
// "skip when missing" for a destination, so the host's Dest is looked at here: the
// plan uses these kinds only for kernel-global paths below /proc and /sys, which the
// host's proc and sysfs show as the sandbox's do. A missing Dest gives no option.
// bwrap's --remount-ro needs a mount point, hence the read-only bind of Dest itself.
func coverOpts(op mounts.Op) ([][]string, error) {
	fi, err := os.Lstat(op.Dest)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	switch {
	case op.Kind == mounts.ReadOnly:
		return [][]string{{"--ro-bind", op.Dest, op.Dest}}, nil
	case fi.IsDir():
		return [][]string{{"--perms", "0555", "--tmpfs", op.Dest}, {"--remount-ro", op.Dest}}, nil
	}
	return [][]string{{"--ro-bind", "/dev/null", op.Dest}}, nil
}

func checkPath(what, p string) error {
	if err := checkString(what, p); err != nil {
		return err
	}
	if !filepath.IsAbs(p) {
		return fmt.Errorf("%s %q is not an absolute path", what, p)
	}
	return nil
}

// checkString refuses what cannot travel in an argv: exec would fail on a NUL byte
// with a message that names no operation.
func checkString(what, s string) error {
	if strings.IndexByte(s, 0) >= 0 {
		return fmt.Errorf("%s %q contains a NUL byte", what, s)
	}
	return nil
}

// InitCommand is the argv Run executes: Command's, but the sandbox's PID 1 is
// agentbox's own init (exe, bound read-only at InitPath; --as-pid-1, --argv0), which
// runs plan's command as the native backend does — its own process group in the
// terminal's foreground, non-dumpable, reaping, forwarding signals, mirroring job
// control over ControlFD — instead of bwrap's pid 1, which is dumpable and leaves
// Ctrl-C to kill bwrap's monitor (bubblewrap #369).
//
// Every bind source but "/" is passed as a descriptor (--bind-fd, --ro-bind-fd, and
// --dev-bind's /proc/self/fd/N) that
// Run opens without following symlinks: bwrap would otherwise resolve the path again,
// following whatever symlink a process swapped into it meanwhile. sources lists them
// in descriptor order, from FirstSourceFD.
//
// With a TmpSize, the RAM-backed filesystems are directories of the tmpfs budget
// (budget.go), which the stage mounts before bwrap starts; budget says what to mount
// (nil: no stage, each tmpfs bwrap makes is its own).
func InitCommand(path string, plan mounts.Plan, exe string) (argv, sources []string, budget *Budget, err error) {
	if err := requireDeviceIDs(plan); err != nil {
		return nil, nil, nil, err
	}
	g, sources, budget, err := initGroups(path, plan, exe, hostLower)
	if err != nil {
		return nil, nil, nil, err
	}
	for _, x := range g {
		argv = append(argv, x...)
	}
	return argv, sources, budget, nil
}

// FirstSourceFD is the descriptor of the first bind source (see InitCommand).
const FirstSourceFD = ControlFD + 1

func initGroups(path string, plan mounts.Plan, exe string, lower lowerFunc) ([][]string, []string, *Budget, error) {
	if err := checkPath("agentbox binary", exe); err != nil {
		return nil, nil, nil, fmt.Errorf("bwrap backend: %w", err)
	}
	var budget *Budget
	if plan.TmpSize > 0 {
		budget = &Budget{Size: plan.TmpSize, PtyMax: plan.PtyMax}
	}
	g, err := commandGroups(path, plan, lower, budget)
	if err != nil {
		return nil, nil, nil, err
	}
	var sources []string
	for i, x := range g {
		switch {
		case x[0] == stageBind:
			g[i] = x[1:]
			continue
		case (x[0] == "--bind" || x[0] == "--ro-bind") && len(x) == 3 && x[1] != "/":
			g[i] = []string{x[0] + "-fd", fmt.Sprint(FirstSourceFD + len(sources)), x[2]}
			sources = append(sources, x[1])
		case x[0] == "--dev-bind" && len(x) == 3:
			// bwrap has no --dev-bind-fd; it resolves a source in the host's view,
			// where its own /proc/self/fd/N is the descriptor Run opened.
			g[i] = []string{x[0], fmt.Sprintf("/proc/self/fd/%d", FirstSourceFD+len(sources)), x[2]}
			sources = append(sources, x[1])
		}
	}
	if budget != nil {
		resolved := append([]string{path, exe}, sources...)
		for _, op := range plan.Ops {
			if op.Kind == mounts.Overlay {
				resolved = append(resolved, op.Source)
			}
		}
		if err := stageSources(resolved...); err != nil {
			return nil, nil, nil, fmt.Errorf("bwrap backend: %w", err)
		}
	}
	// g ends with --chdir DIR and -- COMMAND…: bind the init before the chdir (after
	// every plan operation, so /run is the private one) and run it instead.
	n := len(g)
	out := append([][]string{}, g[:n-2]...)
	// The init is the running binary, by descriptor (selfExe): what lies at exe's
	// path may have been replaced since agentbox started.
	out = append(out, []string{"--ro-bind-fd", fmt.Sprint(FirstSourceFD + len(sources)), InitPath}, []string{"--as-pid-1"},
		[]string{"--argv0", "agentbox-init"}, g[n-2], []string{"--", InitPath})
	return out, append(sources, selfExe), budget, nil
}

// selfExe is the running agentbox binary, which the stage and the init are: a path
// names whatever lies there now, which a process that can write there (a second
// session's sandbox, when the binary lies in its repository or an --add-dir) may have
// replaced since agentbox started; /proc/self/exe is the file it started from.
const selfExe = "/proc/self/exe"

// DryRun checks the bwrap binary as Run would (bwrapcheck.Lookup) and writes the
// exact argv Run would execute for plan, shell-quoted, one option per line with
// backslash continuations, then as comments the bind sources behind --bind-fd and
// the namespaces bwrap starts in (StageComment).
// Descriptors 3 (status), 4 (seccomp program), 5 (control) and the sources are open
// only when agentbox runs bwrap.
func DryRun(w io.Writer, plan mounts.Plan) error {
	bin, err := bwrapcheck.Lookup(plan.Writable()...)
	if err != nil {
		return err
	}
	bin.Close() // nothing runs it
	exe, err := selfPath()
	if err != nil {
		return err
	}
	g, sources, budget, err := initGroups(bin.Path, plan, exe, hostLower)
	if err != nil {
		return err
	}
	quoted := make([]string, len(plan.Command))
	for i, a := range plan.Command {
		quoted[i] = Quote(a)
	}
	var b strings.Builder
	b.WriteString(Format(g))
	for i, src := range sources {
		fmt.Fprintf(&b, "# fd %d: %s\n", FirstSourceFD+i, Quote(src))
	}
	b.WriteString(StageComment + "\n")
	if budget != nil {
		fmt.Fprintf(&b, "# there, before bwrap, agentbox mounts at %s a copy of / (%s) and the tmpfs budget (--tmp-size: %s), whose directories %s/0..%d it binds and whose root it detaches\n",
			StageDir, stageRoot, budget.Options(), StageDir, len(budget.Dirs)-1)
		if budget.PtyMax > 0 {
			fmt.Fprintf(&b, "# and at %s a devpts (%s), bound over bwrap's own /dev/pts\n", stagePts, budget.PtsOptions())
		}
	}
	if l := plan.UserLimitsLine(); l != "" {
		b.WriteString("# there, before bwrap, agentbox writes that namespace's /proc/sys/user and lowers its resource limits: " + l + "\n")
	}
	// The init's too: it enters the Landlock domain, or the masks are in the argv.
	b.WriteString("# " + plan.PathSocketsLine() + "\n")
	if plan.Proxy != "" {
		// Not bwrap's part either: the init's, inside bwrap's network namespace.
		fmt.Fprintf(&b, "# agentbox's init listens on %s inside for the launcher's proxy (--allow-net)\n", plan.Proxy)
		for _, e := range plan.Env {
			fmt.Fprintf(&b, "# env %s\n", Quote(e))
		}
	}
	for _, m := range plan.HostPorts {
		fmt.Fprintf(&b, "# agentbox's init listens on 127.0.0.1:%d inside for the launcher's relay to the host's 127.0.0.1:%d (--host-port)\n", m.Inside, m.Host)
	}
	for _, m := range plan.Publish {
		fmt.Fprintf(&b, "# agentbox's launcher relays the host's 127.0.0.1:%d to 127.0.0.1:%d inside (--publish)\n", m.Host, m.Inside)
	}
	// The command reaches the init over the control socket, not in bwrap's argv.
	fmt.Fprintf(&b, "# agentbox's init (PID 1) then runs: %s\n", strings.Join(quoted, " "))
	_, err = io.WriteString(w, b.String())
	return err
}

// StageComment is the dry run's line for how bwrap is started (privateStage): what
// a user running the argv by hand needs around it to get the same sandbox.
const StageComment = "# bwrap starts in a user and mount namespace of agentbox's, every mount private (as under 'unshare --user --map-current-user --mount --propagation private')"

// selfPath is the running agentbox binary, symlinks resolved, to be bound into the
// sandbox as its init.
func selfPath() (string, error) {
	exe, err := os.Executable()
	if err == nil {
		exe, err = filepath.EvalSymlinks(exe)
	}
	if err != nil {
		return "", fmt.Errorf("bwrap backend: locate the agentbox binary: %w", err)
	}
	return exe, nil
}

// Format renders argument groups as a shell command, one group per line.
func Format(groups [][]string) string {
	var b strings.Builder
	for i, g := range groups {
		if i > 0 {
			b.WriteString(" \\\n  ")
		}
		for j, a := range g {
			if j > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(Quote(a))
		}
	}
	b.WriteByte('\n')
	return b.String()
}

// Quote quotes s for a POSIX shell: unchanged when it holds only characters no shell
// treats specially, else in single quotes. Strings with control characters or invalid
// UTF-8 use bash's $'…' form, so the output stays one line per option.
func Quote(s string) string {
	if s == "" {
		return "''"
	}
	safe, printable := true, true
	for i, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', strings.ContainsRune("@%+=:,./_-", r):
		case r == 0xfffd && !strings.HasPrefix(s[i:], "\ufffd"), r < 0x20, r == 0x7f:
			safe, printable = false, false
		default:
			safe = false
		}
	}
	switch {
	case safe:
		return s
	case printable:
		return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
	}
	var b strings.Builder
	b.WriteString("$'")
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' || c == '\'':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\t':
			b.WriteString(`\t`)
		case c < 0x20 || c >= 0x7f:
			// Every byte outside printable ASCII as \xHH: exact for invalid UTF-8 too.
			fmt.Fprintf(&b, `\x%02x`, c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

// lowerFunc returns the permission bits an overlay's root gets for the lower
// directory at path (overlay.UpperFor of its host attributes).
type lowerFunc func(path string) (uint32, error)
