package nsinit

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/safepath"
	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/overlay"
)

// The plan is applied in two passes, as bubblewrap does:
//
//   - capture: every host source (bind sources, the overlay's lower layer, the device
//     nodes of /dev) is taken as a detached mount or an O_PATH fd while the host view
//     is still intact, resolving paths without following any symlink;
//   - apply: the operations run in plan order on the sandbox view, attaching the
//     captured trees through fds (move_mount), so a source hidden by an earlier
//     operation (a repository below /tmp or below HOME) is still the host's.
//
// Mounts are made in place in the init's mount namespace; no staging root and no
// pivot_root are needed, because nothing outside the namespace is changed and every
// host mount is made read-only recursively.

// devNodes are the host devices bound into the private /dev.
var devNodes = []string{"null", "zero", "full", "random", "urandom", "tty"}

// skipDevNode is the rule both inits capture devNodes by: a host without /dev/tty
// (no controlling-terminal device: some containers) gets a /dev without it; any
// other failure to capture a node, tty included, fails the launch. err is what the
// capture (the Go init) or the launcher's look at the host (the raw init's
// compiler) got for /dev/name.
func skipDevNode(name string, err error) bool {
	return name == "tty" && errors.Is(err, fs.ErrNotExist)
}

// captured is what the capture pass took for one operation.
type captured struct {
	tree  int            // detached mount (open_tree clone), or -1
	fd    int            // O_PATH fd (overlay lower), or -1
	nodes map[string]int // Dev: detached clones of the device nodes
}

type executor struct {
	plan     mounts.Plan
	caps     []captured
	setattr  bool // mount_setattr(2) available (Linux 5.12)
	timer    *Timer
	scratchs []int
}

// applyPlan runs the plan. Every fd it opens is closed before it returns.
func applyPlan(plan mounts.Plan, t *Timer) (err error) {
	x := &executor{plan: plan, timer: t, setattr: haveMountSetattr()}
	defer x.closeAll()

	// Nothing we mount may propagate back to the host.
	if err := unix.Mount("", "/", "", unix.MS_SLAVE|unix.MS_REC, ""); err != nil {
		return &MountError{Op: "make-rslave", Target: "/", Flags: unix.MS_SLAVE | unix.MS_REC, Err: err}
	}
	if err := x.capture(); err != nil {
		return err
	}
	t.Mark("capture")
	for i, op := range plan.Ops {
		if err := x.apply(i, op); err != nil {
			return err
		}
		t.Mark(string(op.Kind) + " " + op.Dest)
	}
	return nil
}

func (x *executor) closeAll() {
	for _, c := range x.caps {
		closeFd(c.tree)
		closeFd(c.fd)
		for _, fd := range c.nodes {
			closeFd(fd)
		}
	}
	for _, fd := range x.scratchs {
		closeFd(fd)
	}
}

func closeFd(fd int) {
	if fd >= 0 {
		unix.Close(fd)
	}
}

// isRootRO is the first operation of every plan: the whole host read-only, done in
// place with one recursive mount_setattr rather than a second copy of the tree.
func isRootRO(op mounts.Op) bool {
	return op.Kind == mounts.BindRO && op.Source == "/" && op.Dest == "/"
}

func (x *executor) capture() error {
	x.caps = make([]captured, len(x.plan.Ops))
	for i, op := range x.plan.Ops {
		c := captured{tree: -1, fd: -1}
		var err error
		switch {
		case isRootRO(op):
		case op.Kind == mounts.Bind || op.Kind == mounts.BindRO:
			c.tree, err = cloneTree(op.Source, op.SourceID)
		case op.Kind == mounts.Overlay:
			c.fd, err = safepath.Open(op.Source, unix.O_PATH|unix.O_DIRECTORY)
			if err != nil {
				err = &MountError{Op: "open overlay lower", Source: op.Source, Err: err}
			}
		case op.Kind == mounts.Mask:
			// The null device a masked file is covered with, from the host's /dev.
			c.tree, err = cloneTree("/dev/null", mounts.FileID{})
		case op.Kind == mounts.Dev:
			c.nodes = map[string]int{}
			for _, n := range devNodes {
				fd, cerr := cloneTree("/dev/"+n, mounts.FileID{})
				if skipDevNode(n, cerr) {
					continue
				}
				if cerr != nil {
					err = cerr
					break
				}
				c.nodes[n] = fd
			}
		}
		x.caps[i] = c
		if err != nil {
			return err
		}
	}
	return nil
}

// CheckSourceID checks that fd, a source opened for a bind, has the identity want
// (mounts.Op.SourceID; zero: unchecked). An other one is ErrSourceChanged.
func CheckSourceID(fd int, want mounts.FileID) error {
	if want == (mounts.FileID{}) {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if (mounts.FileID{Dev: st.Dev, Ino: st.Ino}) != want {
		return ErrSourceChanged
	}
	return nil
}

// cloneTree takes a detached, recursive copy of the mount tree at path, opened without
// following symlinks in any component, and having the identity want.
func cloneTree(path string, want mounts.FileID) (int, error) {
	fd, err := safepath.Open(path, unix.O_PATH)
	if err != nil {
		return -1, &MountError{Op: "open", Source: path, Err: err}
	}
	defer unix.Close(fd)
	if err := CheckSourceID(fd, want); err != nil {
		return -1, &MountError{Op: "open", Source: path, Err: err}
	}
	tree, err := unix.OpenTree(fd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH|unix.AT_RECURSIVE)
	if err != nil {
		me := &MountError{Op: "open_tree", Source: path, Err: err}
		if err == unix.ENOSYS {
			// Capturing a source before it is covered needs a detached clone; there
			// is no safe way to do that with mount(2) alone inside the namespace.
			me.Hint = "the native backend needs open_tree/move_mount (Linux 5.2; a seccomp filter may hide them); use --backend bwrap, or run 'agentbox doctor'"
		}
		return -1, me
	}
	return tree, nil
}

func (x *executor) apply(i int, op mounts.Op) error {
	c := x.caps[i]
	switch op.Kind {
	case mounts.BindRO:
		if isRootRO(op) {
			return x.rootReadOnly()
		}
		if err := x.makeReadOnly(c.tree, op.Source); err != nil {
			return err
		}
		return x.attach(c.tree, op, false)
	case mounts.Bind:
		return x.attach(c.tree, op, true)
	case mounts.Tmpfs:
		return x.tmpfs(op.Dest, op.Mode, unix.MS_NOSUID|unix.MS_NODEV)
	case mounts.Proc:
		return x.mountAt(op.Dest, "proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
	case mounts.Dev:
		return x.dev(op.Dest, c.nodes)
	case mounts.Overlay:
		return x.overlay(op, c.fd)
	case mounts.ReadOnly:
		return x.readOnly(op)
	case mounts.Mask:
		return x.mask(op, c.tree)
	}
	return fmt.Errorf("unknown mount operation %q for %s", op.Kind, op.Dest)
}

// openCover opens the destination of a ReadOnly or Mask operation; ok is false when
// this kernel has no such file (the operation is then skipped).
func openCover(dest string) (fd int, ok bool, err error) {
	fd, err = safepath.Open(dest, unix.O_PATH)
	if errors.Is(err, unix.ENOENT) {
		return -1, false, nil
	}
	if err != nil {
		return -1, false, &MountError{Op: "open mount point", Target: dest, Err: err}
	}
	return fd, true, nil
}

// readOnly binds op.Dest onto itself, read-only (mounts.ReadOnly).
func (x *executor) readOnly(op mounts.Op) error {
	fd, ok, err := openCover(op.Dest)
	if !ok {
		return err
	}
	defer unix.Close(fd)
	tree, err := unix.OpenTree(fd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH|unix.AT_RECURSIVE)
	if err != nil {
		return &MountError{Op: "open_tree", Source: op.Dest, Err: err}
	}
	defer unix.Close(tree)
	return x.cover(tree, fd, op)
}

// cover makes tree read-only and attaches it onto the open mount point dest.
func (x *executor) cover(tree, dest int, op mounts.Op) error {
	if err := x.makeReadOnly(tree, op.Dest); err != nil {
		return err
	}
	if err := unix.MoveMount(tree, "", dest, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return &MountError{Op: "move_mount", Source: op.Source, Target: op.Dest, Err: err}
	}
	if !x.setattr {
		return remountTreeRO(op.Dest)
	}
	return nil
}

// mask hides op.Dest (mounts.Mask): a directory under an empty read-only tmpfs, a
// file under the host's null device (null, captured), read-only.
func (x *executor) mask(op mounts.Op, null int) error {
	fd, ok, err := openCover(op.Dest)
	if !ok {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &MountError{Op: "stat", Target: op.Dest, Err: err}
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return x.mountAt(op.Dest, "tmpfs", "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0555")
	}
	return x.cover(null, fd, mounts.Op{Source: "/dev/null", Dest: op.Dest})
}

// openDest opens the mount point dest in the sandbox view without following
// symlinks, creating missing directories when mkdir is set (below a fresh tmpfs).
func openDest(dest string, mkdir bool) (int, error) {
	fd, err := safepath.Open(dest, unix.O_PATH)
	if err == nil || !mkdir || !errors.Is(err, unix.ENOENT) {
		if err != nil {
			err = &MountError{Op: "open mount point", Target: dest, Err: err}
		}
		return fd, err
	}
	root, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	defer unix.Close(root)
	fd, err = safepath.MkdirAll(root, dest, 0o755)
	if err != nil {
		return -1, &MountError{Op: "create mount point", Target: dest, Err: err}
	}
	return fd, nil
}

// attach moves a captured tree onto op.Dest.
func (x *executor) attach(tree int, op mounts.Op, mkdir bool) error {
	dest, err := openDest(op.Dest, mkdir)
	if err != nil {
		return err
	}
	defer unix.Close(dest)
	if err := unix.MoveMount(tree, "", dest, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return &MountError{Op: "move_mount", Source: op.Source, Target: op.Dest, Err: err}
	}
	if op.Kind == mounts.BindRO && !x.setattr {
		// Before 5.12 the detached tree could not be made read-only; do it now
		// that it is attached, mount by mount.
		return remountTreeRO(op.Dest)
	}
	return nil
}

// makeReadOnly sets MOUNT_ATTR_RDONLY on a detached tree, recursively.
func (x *executor) makeReadOnly(tree int, what string) error {
	if !x.setattr {
		return nil // attach remounts instead
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
		return &MountError{Op: "mount_setattr rdonly", Source: what, Err: err}
	}
	return nil
}

// rootReadOnly makes every mount of the namespace read-only (P1).
func (x *executor) rootReadOnly() error {
	if x.setattr {
		attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}
		if err := unix.MountSetattr(unix.AT_FDCWD, "/", unix.AT_RECURSIVE, &attr); err != nil {
			return &MountError{Op: "mount_setattr rdonly", Target: "/", Err: err}
		}
		return nil
	}
	return remountTreeRO("/")
}

// mountAt mounts a new filesystem at dest through an fd of the mount point.
func (x *executor) mountAt(dest, fstype, source string, flags uintptr, data string) error {
	fd, err := openDest(dest, true)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Mount(source, safepath.FdPath(fd), fstype, flags, data); err != nil {
		return &MountError{Op: "mount " + fstype, Target: dest, Flags: flags, Data: data, Err: err}
	}
	return nil
}

func (x *executor) tmpfs(dest string, mode uint32, flags uintptr) error {
	return x.mountAt(dest, "tmpfs", "tmpfs", flags, fmt.Sprintf("mode=%04o", mode))
}

// dev builds a minimal /dev: a tmpfs, the host's harmless device nodes, a private
// devpts instance (so the command cannot reach the caller's other terminals) and a
// private shm.
func (x *executor) dev(dest string, nodes map[string]int) error {
	if err := x.tmpfs(dest, 0o755, unix.MS_NOSUID|unix.MS_NOEXEC); err != nil {
		return err
	}
	dir, err := safepath.Open(dest, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return &MountError{Op: "open", Target: dest, Err: err}
	}
	defer unix.Close(dir)
	for _, name := range devNodes {
		tree, ok := nodes[name]
		if !ok {
			continue
		}
		f, err := unix.Openat(dir, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o666)
		if err != nil {
			return &MountError{Op: "create", Target: dest + "/" + name, Err: err}
		}
		unix.Close(f)
		if err := unix.MoveMount(tree, "", dir, name, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return &MountError{Op: "move_mount", Source: "/dev/" + name, Target: dest + "/" + name, Err: err}
		}
	}
	for _, d := range []string{"pts", "shm"} {
		if err := unix.Mkdirat(dir, d, 0o755); err != nil {
			return &MountError{Op: "mkdir", Target: dest + "/" + d, Err: err}
		}
	}
	if err := x.mountAt(dest+"/pts", "devpts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620"); err != nil {
		return err
	}
	if err := x.tmpfs(dest+"/shm", 0o1777, unix.MS_NOSUID|unix.MS_NODEV); err != nil {
		return err
	}
	links := [][2]string{
		{"pts/ptmx", "ptmx"}, {"/proc/self/fd", "fd"}, {"/proc/self/fd/0", "stdin"},
		{"/proc/self/fd/1", "stdout"}, {"/proc/self/fd/2", "stderr"}, {"/proc/kcore", "core"},
	}
	for _, l := range links {
		if err := unix.Symlinkat(l[0], dir, l[1]); err != nil {
			return &MountError{Op: "symlink", Target: dest + "/" + l[1], Err: err}
		}
	}
	return nil
}

// overlay mounts HOME's disposable overlay. The lower layer is the host directory
// captured before anything covered it. The upper and work dirs live on a tmpfs
// mounted at the destination itself, which the overlay then covers: nothing in the
// sandbox can reach them, and they vanish with the namespace.
func (x *executor) overlay(op mounts.Op, lower int) error {
	if err := x.tmpfs(op.Dest, overlay.ScratchMode, overlay.Flags); err != nil {
		return err
	}
	scratch, err := safepath.Open(op.Dest, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return &MountError{Op: "open overlay scratch", Target: op.Dest, Err: err}
	}
	x.scratchs = append(x.scratchs, scratch)
	for _, d := range []string{overlay.UpperDir, overlay.WorkDir} {
		if err := unix.Mkdirat(scratch, d, overlay.ScratchMode); err != nil {
			return &MountError{Op: "mkdir overlay " + d, Target: op.Dest, Err: err}
		}
	}
	// The lower as this namespace shows it: an owner it does not map reads as the
	// overflow id, which is not the sandbox's (only the launcher's ids are mapped).
	var st unix.Stat_t
	if err := unix.Fstat(lower, &st); err != nil {
		return &MountError{Op: "stat overlay lower", Source: op.Source, Err: err}
	}
	up := overlay.UpperFor(overlay.Attr{UID: st.Uid, GID: st.Gid, Mode: st.Mode}, os.Getuid(), os.Getgid())
	if up.Chown {
		if err := unix.Fchownat(scratch, overlay.UpperDir, int(st.Uid), int(st.Gid), unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return &MountError{Op: "chown overlay upper", Target: op.Dest, Err: err}
		}
	}
	if err := unix.Fchmodat(scratch, overlay.UpperDir, up.Mode, 0); err != nil {
		return &MountError{Op: "chmod overlay upper", Target: op.Dest, Err: err}
	}
	dir := safepath.FdPath(scratch) + "/"
	data := overlay.Options([]string{safepath.FdPath(lower)}, dir+overlay.UpperDir, dir+overlay.WorkDir)
	err = x.mountAt(op.Dest, "overlay", "overlay", overlay.Flags, data)
	if retry, ok := overlay.Fallback(data, err); ok {
		err = x.mountAt(op.Dest, "overlay", "overlay", overlay.Flags, retry)
	}
	var me *MountError
	if errors.As(err, &me) {
		if h := overlay.Hint(me.Err); h != "" {
			me.Hint = h
		}
	}
	return err
}

// haveMountSetattr probes mount_setattr(2) with an empty change.
func haveMountSetattr() bool {
	err := unix.MountSetattr(unix.AT_FDCWD, "/", 0, &unix.MountAttr{})
	return err != unix.ENOSYS
}

// remountTreeRO is the fallback for kernels without mount_setattr: every mount at or
// below dir is remounted read-only, keeping the flags the kernel locks (nosuid,
// nodev, noexec, atime) or the remount is refused.
func remountTreeRO(dir string) error {
	targets, err := mountPointsBelow(dir)
	if err != nil {
		return err
	}
	for _, t := range targets {
		var sfs unix.Statfs_t
		if err := unix.Statfs(t, &sfs); err != nil {
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EACCES) {
				continue // hidden below another mount, or unreachable: not visible either
			}
			return &MountError{Op: "statfs", Target: t, Err: err}
		}
		flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY)
		for _, f := range []struct{ st, ms uintptr }{
			{unix.ST_NOSUID, unix.MS_NOSUID}, {unix.ST_NODEV, unix.MS_NODEV},
			{unix.ST_NOEXEC, unix.MS_NOEXEC}, {unix.ST_NOATIME, unix.MS_NOATIME},
			{unix.ST_NODIRATIME, unix.MS_NODIRATIME}, {unix.ST_RELATIME, unix.MS_RELATIME},
		} {
			if uintptr(sfs.Flags)&f.st != 0 {
				flags |= f.ms
			}
		}
		if err := unix.Mount("", t, "", flags, ""); err != nil {
			return &MountError{Op: "remount", Target: t, Flags: flags, Err: err}
		}
	}
	return nil
}

// mountPointsBelow lists the mount points at or below dir, from the namespace's own
// mount table, parents before children.
func mountPointsBelow(dir string) ([]string, error) {
	infos, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	out := make([]string, 0, len(infos))
	for _, m := range infos {
		out = append(out, m.Mountpoint)
	}
	sort.Strings(out)
	return out, nil
}
