package kernel

import (
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/termsafe"
)

// explain returns the fix for a failed check, from what was measured: the sysctls
// read, the errno the child saw, the masking of /proc. An empty string means no
// setting helps (another kernel does).
func explain(name string, r Report, res stepResult) string {
	switch name {
	case UserNS:
		return explainUserNS(r)
	case OverlayUserNS:
		if v, ok := r.Sysctls["overlay.permit_mounts_in_userns"]; ok && v != "Y" && v != "1" {
			return "this kernel (Debian 11's 5.10) allows overlayfs in user namespaces only with a module option: " +
				"echo 'options overlay permit_mounts_in_userns=1' > /etc/modprobe.d/agentbox-overlay.conf, " +
				"then reload the module (modprobe -r overlay && modprobe overlay, while nothing uses it) or reboot; or use Linux 5.11 or later"
		}
		if unix.Errno(res.Errno) == unix.ENODEV {
			return "the overlay filesystem is not available: modprobe overlay (as root)"
		}
		if onOverlay(os.Getenv("HOME")) {
			return "HOME is itself on an overlay (inside an agentbox sandbox or a container): overlayfs cannot stack on it in a user namespace; run agentbox outside it"
		}
		if below := mountsBelow("/proc", os.Getenv("HOME")); len(below) > 0 {
			return fmt.Sprintf("a filesystem is mounted below HOME (%s): in a user namespace the kernel refuses an overlay "+
				"over a directory that holds a mount it may not uncover; unmount it, or mount it outside HOME "+
				"(say under /mnt) and leave a symlink in HOME", termsafe.Quote(below[0]))
		}
		if ok, known := AtLeast(r.Kernel, "5.11"); ok && known {
			return "this kernel is new enough (Linux 5.11 or later): the mount was refused for another reason; check any seccomp or LSM policy, and that HOME is on an ordinary filesystem"
		}
		return "needs Linux 5.11 or later (overlayfs in user namespaces)"
	case PIDNSProc:
		if len(r.MaskedProc) > 0 {
			return fmt.Sprintf("this runs in a container whose /proc has masked paths (%s), so the kernel refuses a new proc; "+
				"run the container with /proc unmasked (docker: --security-opt systempaths=unconfined; podman: --security-opt unmask=ALL) or run agentbox on the host",
				strings.Join(first(r.MaskedProc, 3), ", "))
		}
		return ""
	case OverlayOpaqueDir:
		return "the HOME overlay's upper layer is on tmpfs, which stores no user xattrs before Linux 6.6: " +
			"inside the sandbox, a directory of the real HOME cannot be deleted and re-created; use Linux 6.6 or later"
	case FanotifyFID:
		return "needs Linux 5.17 or later, a filesystem that gives fanotify file handles (5.10's tmpfs gives none), and fs.fanotify.max_user_groups not reached: " +
			"without it each session's end reads the whole working tree again; nothing is less safe"
	case TmpfsUserXattr:
		return "keep the HOME overlay's upper directory on a disk filesystem (ext4, xfs, btrfs), or use Linux 6.6 or later"
	case Cgroup2:
		return "boot with the unified cgroup hierarchy (systemd.unified_cgroup_hierarchy=1); agentbox works without it"
	case CgroupNS:
		return "needs a kernel built with CONFIG_CGROUPS (Linux 4.6 or later)"
	}
	return ""
}

// explainUserNS names the knob that forbids user namespaces, checked in the order
// the kernel applies them.
func explainUserNS(r Report) string {
	root := ""
	if r.UID == 0 {
		root = " (doctor ran as root, which these limits do not apply to; run it as the user who runs agentbox)"
	}
	switch {
	case r.Sysctls["kernel.unprivileged_userns_clone"] == "0":
		return "unprivileged user namespaces are switched off: sysctl -w kernel.unprivileged_userns_clone=1, " +
			"and to keep it: echo kernel.unprivileged_userns_clone=1 > /etc/sysctl.d/90-agentbox.conf"
	case r.Sysctls["user.max_user_namespaces"] == "0":
		return "user namespaces are limited to 0: sysctl -w user.max_user_namespaces=15000, " +
			"and to keep it: echo user.max_user_namespaces=15000 > /etc/sysctl.d/90-agentbox.conf"
	case r.Sysctls["kernel.apparmor_restrict_unprivileged_userns"] == "1":
		exe, _ := os.Executable()
		if exe == "" {
			exe = "/usr/local/bin/agentbox"
		}
		return "AppArmor (Ubuntu 23.10+) lets unprivileged programs create user namespaces only with a profile that allows it: " +
			"write /etc/apparmor.d/agentbox containing `abi <abi/4.0>, include <tunables/global> profile agentbox " + exe +
			" flags=(unconfined) { userns, }` and run apparmor_parser -r /etc/apparmor.d/agentbox " +
			"(or, for the whole machine, sysctl -w kernel.apparmor_restrict_unprivileged_userns=0)"
	case len(r.MaskedProc) > 0:
		return "this looks like a container; its seccomp profile or missing capabilities refuse user namespaces: " +
			"run the container with --security-opt seccomp=unconfined (or a profile allowing clone/unshare with CLONE_NEWUSER)" + root
	}
	return "the kernel refused a user namespace; check kernel.unprivileged_userns_clone, user.max_user_namespaces and any seccomp or LSM policy" + root
}

func first(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], "…")
	}
	return s
}

// onOverlay reports whether path lies on an overlay filesystem.
func onOverlay(path string) bool {
	var st unix.Statfs_t
	return path != "" && unix.Statfs(path, &st) == nil && st.Type == unix.OVERLAYFS_SUPER_MAGIC
}
