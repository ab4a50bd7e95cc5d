package kernel

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/overlay"
)

// childEnv carries the probe child's job: childJob or childJobUserNS; any other
// value is refused.
const (
	childEnv = "AGENTBOX_KERNEL_PROBE"
	childJob = "namespaces"
)

// IsChild reports whether this process was started by Probe as its probe child.
func IsChild() bool { return os.Getenv(childEnv) != "" }

// stepResult is what the child reports for one check.
type stepResult struct {
	OK     bool   `json:"ok"`
	Detail string `json:"detail,omitempty"`
	Errno  int    `json:"errno,omitempty"`
}

// ChildMain runs the probes that need new namespaces, prints their results as JSON on
// stdout and returns the exit status. It runs as root of a fresh user namespace, in
// new mount and PID namespaces, so nothing it mounts is visible outside.
func ChildMain() int {
	switch job := os.Getenv(childEnv); job {
	case childJobUserNS:
		return 0 // having started is the result
	case childJob:
	default:
		fmt.Fprintf(os.Stderr, "kernel probe: unknown job %q\n", job)
		return 2
	}
	res := runChildProbes()
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		fmt.Fprintf(os.Stderr, "kernel probe: %v\n", err)
		return 1
	}
	return 0
}

func runChildProbes() map[string]stepResult {
	res := map[string]stepResult{}
	fail := func(name, step string, err error) {
		r := stepResult{Detail: step + ": " + err.Error()}
		var errno unix.Errno
		if errors.As(err, &errno) {
			r.Errno = int(errno)
		}
		res[name] = r
	}
	ok := func(name string) { res[name] = stepResult{OK: true} }

	// Nothing below may reach the parent's mounts, whatever the propagation of the
	// mounts we inherited.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		fail(mountStep, "make / private", err)
		return res
	}
	scratch := scratchDir()
	lower := lowerDir(scratch)
	if err := unix.Mount("tmpfs", scratch, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755"); err != nil {
		fail(mountStep, "mount tmpfs on "+scratch, err)
		return res
	}
	ok(mountStep)
	at := func(name string) string { return filepath.Join(scratch, name) }

	if err := probeTmpfsXattr(at("xattr")); err != nil {
		fail(TmpfsUserXattr, "setxattr user.* on tmpfs", err)
	} else {
		ok(TmpfsUserXattr)
	}

	note, step, err, opaqueErr := probeOverlay(scratch, lower)
	switch {
	case err != nil:
		fail(OverlayUserNS, step, err)
	case opaqueErr != nil:
		res[OverlayUserNS] = stepResult{OK: true, Detail: note}
		fail(OverlayOpaqueDir, "replace a deleted lower directory", opaqueErr)
	default:
		res[OverlayUserNS] = stepResult{OK: true, Detail: note}
		ok(OverlayOpaqueDir)
	}

	if step, err := probeNewMountAPI(at("fsmount"), at("open_tree")); err != nil {
		fail(NewMountAPI, step, err)
	} else {
		ok(NewMountAPI)
	}

	if err := probeMountSetattr(at("setattr")); err != nil {
		fail(MountSetattr, "mount_setattr MOUNT_ATTR_RDONLY", err)
	} else {
		ok(MountSetattr)
	}

	if err := probeProc(at("proc")); err != nil {
		fail(PIDNSProc, "mount proc", err)
	} else {
		ok(PIDNSProc)
	}
	return res
}

// mountStep is the child's result for "a mount inside the user namespace works",
// part of the UserNS check: AppArmor's restriction lets the namespace be created
// but takes the capabilities away, so only a mount shows it.
const mountStep = "mount"

// scratchDir is a directory to mount the child's tmpfs on. Any existing directory
// works: the mount is private to the child's mount namespace.
func scratchDir() string {
	for _, d := range []string{"/tmp", "/var/tmp", "/mnt", "/"} {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			return d
		}
	}
	return "/"
}

func probeTmpfsXattr(path string) error {
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		return err
	}
	if err := unix.Setxattr(path, "user.agentbox.probe", []byte("1"), 0); err != nil {
		return err
	}
	buf := make([]byte, 8)
	n, err := unix.Getxattr(path, "user.agentbox.probe", buf)
	if err != nil {
		return err
	}
	if string(buf[:n]) != "1" {
		return fmt.Errorf("read back %q", buf[:n])
	}
	return nil
}

// probeOverlay mounts an overlay the way the HOME overlay is used: upper and work
// on tmpfs, the userxattr option an unprivileged mount needs, and as lower layers a
// directory of the host's filesystem below one on the tmpfs that holds a file and a
// directory to delete. Linux 5.10 does not know userxattr (EINVAL); Debian's 5.10
// can still mount an overlay in a user namespace without it when its
// permit_mounts_in_userns option is set, so the mount is retried without — the
// launcher's options and retry (package overlay), so doctor tests what a launch does.
//
// It writes a file and deletes a lower one (a whiteout); note says how the mount
// was made when it needed the retry. opaqueErr is the result of replacing a deleted
// lower directory by a new one, which needs an opaque-directory xattr on the upper
// layer (OverlayOpaqueDir).
func probeOverlay(scratch, hostLower string) (note, step string, err, opaqueErr error) {
	lower, upper, work, merged := filepath.Join(scratch, "lower"), filepath.Join(scratch, "upper"), filepath.Join(scratch, "work"), filepath.Join(scratch, "merged")
	for _, d := range []string{lower, filepath.Join(lower, "dir"), upper, work, merged} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return "", "mkdir", err, nil
		}
	}
	for _, f := range []string{"file", "dir/file"} {
		if err := os.WriteFile(filepath.Join(lower, f), []byte("lower"), 0o644); err != nil {
			return "", "create the lower layer", err, nil
		}
	}
	// Messages name the layers, not their paths: the text must be the same for
	// every run, so that doctor's advice and the launcher's refusal match.
	opts := overlay.Options([]string{lower, hostLower}, upper, work)
	err = unix.Mount("overlay", merged, "overlay", 0, opts)
	if retry, ok := overlay.Fallback(opts, err); ok {
		if err2 := unix.Mount("overlay", merged, "overlay", 0, retry); err2 == nil {
			note, err = "mounted without userxattr, which this kernel does not know (Linux < 5.11)", nil
		}
	}
	if err != nil {
		return "", "mount overlay (lower: the home directory, upper: tmpfs, userxattr)", err, nil
	}
	if err := os.WriteFile(filepath.Join(merged, "new"), []byte("x"), 0o600); err != nil {
		return "", "write through the overlay", err, nil
	}
	if _, err := os.Stat(filepath.Join(upper, "new")); err != nil {
		return "", "find the written file in the upper layer", err, nil
	}
	if err := os.Remove(filepath.Join(merged, "file")); err != nil {
		return "", "delete a lower file through the overlay (whiteout)", err, nil
	}
	if _, err := os.Lstat(filepath.Join(merged, "file")); !errors.Is(err, os.ErrNotExist) {
		return "", "deleted lower file still visible", fmt.Errorf("stat: %v", err), nil
	}
	if _, err := os.Lstat(filepath.Join(lower, "file")); err != nil {
		return "", "lower layer changed", err, nil
	}
	return note, "", nil, replaceDir(filepath.Join(merged, "dir"))
}

// replaceDir deletes a directory that comes from a lower layer and creates a new
// one in its place, which must be empty (rm -rf ~/.cache/x && mkdir ~/.cache/x).
func replaceDir(dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("delete: %w", err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("mkdir: %w", err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("read: %w", err)
	}
	if len(ents) != 0 {
		return fmt.Errorf("new directory shows the old one's %s", ents[0].Name())
	}
	return nil
}

// lowerDir is a directory of the host's filesystem used, read-only, as the lower
// layer: $HOME when it is usable (the real case), else a system directory. It must
// not lie below scratch, which the child's tmpfs is about to cover.
func lowerDir(scratch string) string {
	for _, d := range []string{os.Getenv("HOME"), "/etc", "/usr", "/"} {
		if d == "" || !filepath.IsAbs(d) || d == scratch || strings.HasPrefix(d, scratch+"/") {
			continue
		}
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			return d
		}
	}
	return "/"
}

// probeNewMountAPI creates a tmpfs with fsopen/fsconfig/fsmount and attaches it with
// move_mount, then clones that mount with open_tree and attaches the clone.
func probeNewMountAPI(dst, cloneDst string) (string, error) {
	for _, d := range []string{dst, cloneDst} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return "mkdir", err
		}
	}
	fsfd, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return "fsopen tmpfs", err
	}
	defer unix.Close(fsfd)
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return "fsconfig FSCONFIG_CMD_CREATE", err
	}
	mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, 0)
	if err != nil {
		return "fsmount", err
	}
	defer unix.Close(mfd)
	if err := unix.MoveMount(mfd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return "move_mount", err
	}
	tfd, err := unix.OpenTree(unix.AT_FDCWD, dst, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return "open_tree OPEN_TREE_CLONE", err
	}
	defer unix.Close(tfd)
	if err := unix.MoveMount(tfd, "", unix.AT_FDCWD, cloneDst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return "move_mount of the open_tree clone", err
	}
	if err := isMountOf(cloneDst, unix.TMPFS_MAGIC); err != nil {
		return "check the attached clone", err
	}
	return "", nil
}

// probeMountSetattr makes a fresh tmpfs read-only with mount_setattr and checks
// statfs agrees.
func probeMountSetattr(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, ""); err != nil {
		return fmt.Errorf("mount tmpfs: %w", err)
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}
	if err := unix.MountSetattr(unix.AT_FDCWD, dir, unix.AT_RECURSIVE, &attr); err != nil {
		return err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return err
	}
	if st.Flags&unix.ST_RDONLY == 0 {
		return errors.New("mount still writable after mount_setattr")
	}
	return nil
}

// probeProc mounts a proc for the child's PID namespace, as the init of a sandbox does.
func probeProc(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("proc", dir, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return err
	}
	return isMountOf(dir, unix.PROC_SUPER_MAGIC)
}

func isMountOf(dir string, magic int64) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return err
	}
	if st.Type != magic {
		return fmt.Errorf("%s: filesystem type %#x, want %#x", dir, st.Type, magic)
	}
	return nil
}
