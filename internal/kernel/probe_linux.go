package kernel

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/treewatch"
)

// Options says how to run the probes.
type Options struct {
	// Command starts this program as the probe child: executable and arguments.
	// The program must call ChildMain (and exit with its status) when IsChild
	// reports true, before it does anything else. Empty means os.Executable()
	// without arguments, right for a program (or test binary) whose main or
	// TestMain does that dispatch first.
	Command []string
	// Timeout bounds each probe child; zero means 15 seconds.
	Timeout time.Duration
}

// nsFlags are the namespaces of a sandbox that the child is started in.
const nsFlags = unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWCGROUP

// Probe runs every check as the calling user and returns what it measured. It
// never fails: a probe that cannot run is a failed check whose Detail says why.
func Probe(opts Options) Report {
	r := Report{Kernel: Release(), UID: os.Getuid(), Sysctls: readSysctls(), MaskedProc: maskedProc()}
	results := map[string]stepResult{}
	set := func(name string, ok bool, detail string) { results[name] = stepResult{OK: ok, Detail: detail} }

	// One child in all the namespaces a sandbox uses. When it cannot start, find
	// out which namespace is refused.
	child, err := runChild(opts, childJob, nsFlags)
	switch {
	case err == nil:
		for k, v := range child {
			results[k] = v
		}
		set(CgroupNS, true, "")
	case isStartError(err):
		if _, uerr := runChild(opts, childJobUserNS, unix.CLONE_NEWUSER); uerr != nil {
			results[mountStep] = stepResult{Detail: "create a user namespace: " + uerr.Error(), Errno: errnoOf(uerr)}
			break
		}
		child, err2 := runChild(opts, childJob, nsFlags&^unix.CLONE_NEWCGROUP)
		if err2 != nil {
			results[mountStep] = stepResult{Detail: "create mount and PID namespaces in a user namespace: " + err2.Error(), Errno: errnoOf(err2)}
			break
		}
		for k, v := range child {
			results[k] = v
		}
		set(CgroupNS, false, "clone CLONE_NEWCGROUP: "+err.Error())
	default:
		results[mountStep] = stepResult{Detail: err.Error()}
	}

	if fd, err := unix.Openat2(unix.AT_FDCWD, "/", &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS}); err != nil {
		set(Openat2, false, "openat2 / RESOLVE_NO_SYMLINKS: "+err.Error())
	} else {
		unix.Close(fd)
		set(Openat2, true, "")
	}
	if err := probeWatch(); err != nil {
		set(FanotifyFID, false, err.Error())
	} else {
		set(FanotifyFID, true, "")
	}
	abi := fmt.Sprintf("Landlock ABI %d", LandlockABI())
	if LandlockABI() == 0 {
		// The recorder's work-tree Git (shadow/confine.go) is confined by Landlock
		// too; records still run without it, and doctor says so here.
		abi = "no Landlock (missing, or not in the kernel's lsm= list); the recorder's Git is not confined to the repository either (docs/security.md)"
	}
	set(LandlockAbstractUnix, CanScopeAbstractUnix(), abi)
	if CanDenyPathSockets() {
		// Landlock refuses mount(2) in a domain that handles a file-system right.
		set(LandlockResolveUnix, true, abi+"; inside, the command cannot mount: agents' own nested sandboxes that do (bubblewrap, unshare -m) are refused unless --nested-sandbox, which masks the sockets found at launch instead")
	} else {
		set(LandlockResolveUnix, false, abi+"; --nested-sandbox changes nothing here: the command can mount")
	}
	if err := isMountOf("/sys/fs/cgroup", unix.CGROUP2_SUPER_MAGIC); err != nil {
		set(Cgroup2, false, "not cgroup2: "+err.Error())
	} else {
		set(Cgroup2, true, "")
	}

	userns := results[mountStep]
	for _, s := range Specs {
		c := Check{Name: s.Name}
		res, measured := results[s.Name]
		switch {
		case s.Name == UserNS:
			c.OK, c.Detail = userns.OK, userns.Detail
		case measured:
			c.OK, c.Detail = res.OK, res.Detail
		case !userns.OK:
			c.Detail = "not tried: needs a user namespace"
		default:
			c.Detail = "not measured"
		}
		if !c.OK {
			c.Fix = explain(s.Name, r, res)
		}
		r.Checks = append(r.Checks, c)
	}
	return r
}

// childJobUserNS only proves the child started in a user namespace.
const childJobUserNS = "userns"

// startError marks a failure to create the child (clone or exec refused), as
// opposed to a child that ran and failed.
type startError struct{ err error }

func (e startError) Error() string { return e.err.Error() }
func (e startError) Unwrap() error { return e.err }

func isStartError(err error) bool {
	var s startError
	return errors.As(err, &s)
}

func errnoOf(err error) int {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return int(errno)
	}
	return 0
}

func runChild(opts Options, job string, flags uintptr) (map[string]stepResult, error) {
	argv := opts.Command
	if len(argv) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find own executable: %w", err)
		}
		argv = []string{exe}
	}
	timeout := opts.Timeout
	if timeout == 0 {
		timeout = 15 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), childEnv+"="+job)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:                 flags,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
		GidMappingsEnableSetgroups: false,
		Pdeathsig:                  syscall.SIGKILL,
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		// os/exec reports a refused clone as "fork/exec PATH: ERRNO"; keep the errno.
		var pe *os.PathError
		if errors.As(err, &pe) {
			return nil, startError{fmt.Errorf("clone: %w", pe.Err)}
		}
		return nil, startError{err}
	}
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("probe child: %v: %s", err, lastLine(stderr.String()))
	}
	res := map[string]stepResult{}
	if job == childJobUserNS {
		return res, nil
	}
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		return nil, fmt.Errorf("probe child output: %v: %q", err, lastLine(stdout.String()))
	}
	return res, nil
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return s
}

// Release returns the running kernel's release (uname -r).
func Release() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
}

// sysctls are the knobs that gate user namespaces and overlay in them (name, file).
// An array, not a map: a map literal is built by every agentbox process's start-up.
var sysctls = [...][2]string{
	{"kernel.unprivileged_userns_clone", "/proc/sys/kernel/unprivileged_userns_clone"},
	{"user.max_user_namespaces", "/proc/sys/user/max_user_namespaces"},
	{"kernel.apparmor_restrict_unprivileged_userns", "/proc/sys/kernel/apparmor_restrict_unprivileged_userns"},
	{"overlay.permit_mounts_in_userns", "/sys/module/overlay/parameters/permit_mounts_in_userns"},
}

func readSysctls() map[string]string {
	out := map[string]string{}
	for _, sc := range sysctls {
		name, path := sc[0], sc[1]
		if b, err := os.ReadFile(path); err == nil {
			out[name] = strings.TrimSpace(string(b))
		}
	}
	return out
}

// maskedProc lists the mount points strictly inside /proc, except binfmt_misc (an
// empty directory by design, which does not count as masking).
func maskedProc() []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	return parseMaskedProc(f)
}

func parseMaskedProc(r interface{ Read([]byte) (int, error) }) []string {
	var out []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMountinfo(fields[4])
		if strings.HasPrefix(mp, "/proc/") && mp != "/proc/sys/fs/binfmt_misc" {
			out = append(out, mp)
		}
	}
	return out
}

// unescapeMountinfo undoes the octal escapes (\040 for space …) of mountinfo paths.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			ok := true
			for _, c := range s[i+1 : i+4] {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				v = v*8 + byte(c-'0')
			}
			if ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// probeWatch starts a tree watch and marks a new directory in TMPDIR: the group
// (Linux 5.17, and fs.fanotify.max_user_groups) and a mark on that filesystem
// (5.10's tmpfs, for one, gives no file handles to fanotify).
func probeWatch() error {
	w, err := treewatch.New()
	if err != nil {
		return err
	}
	defer w.Close()
	dir, err := os.MkdirTemp("", "agentbox-doctor-")
	if err != nil {
		return err
	}
	defer os.Remove(dir)
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if _, err := w.Add(fd); err != nil {
		return fmt.Errorf("mark a directory in %s: %w", os.TempDir(), err)
	}
	return nil
}
