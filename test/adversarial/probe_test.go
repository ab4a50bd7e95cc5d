package adversarial

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/sandbox"
)

// The probes run inside the sandbox (this test binary, re-executed with probeEnv set)
// as the unprivileged user. Each prints one line per attempt: "ESCAPED ..." when the
// attempt achieved what an attacker wanted, otherwise what stopped it. The tests look
// for "ESCAPED" and, independently, check the host from outside.
var probes = map[string]func(args []string) int{
	"handle":   probeHandle,
	"ptrace":   probePtrace,
	"kill":     probeKill,
	"byuid":    probeByUID,
	"abstract": probeAbstract,
	"exe":      probeExe,
	"fds":      probeFds,
	"flip":     probeFlip,
	"launches": probeLaunches,
	"sockets":  probeSockets,
}

func runProbe(name string, args []string) int {
	p, ok := probes[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "probe %q unknown\n", name)
		return 2
	}
	return p(args)
}

func report(what string, err error) {
	if err == nil {
		fmt.Printf("ESCAPED %s\n", what)
		return
	}
	fmt.Printf("refused %s: %v\n", what, err)
}

// probeHandle: open_by_handle_at (the "shocker" attack) on a handle taken from each
// path, for writing, and also for reading the mount's root by a forged handle.
func probeHandle(args []string) int {
	for _, path := range args {
		h, mountID, err := unix.NameToHandleAt(unix.AT_FDCWD, path, 0)
		if err != nil {
			fmt.Printf("refused name_to_handle_at %s: %v\n", path, err)
			continue
		}
		_ = mountID
		dir, err := unix.Open(filepath.Dir(path), unix.O_PATH|unix.O_DIRECTORY, 0)
		if err != nil {
			fmt.Printf("open dir %s: %v\n", path, err)
			continue
		}
		fd, err := unix.OpenByHandleAt(dir, h, unix.O_WRONLY)
		if err == nil {
			_, werr := unix.Write(fd, []byte("escaped by handle\n"))
			unix.Close(fd)
			report("open_by_handle_at "+path+" for writing", werr)
		} else {
			report("open_by_handle_at "+path+" for writing", err)
		}
		// A forged handle for the root inode of the filesystem (inode 2 on ext4).
		forged := unix.NewFileHandle(h.Type(), []byte{2, 0, 0, 0, 0, 0, 0, 0})
		fd, err = unix.OpenByHandleAt(dir, forged, unix.O_RDONLY)
		if err == nil {
			unix.Close(fd)
		}
		report("open_by_handle_at forged root handle near "+path, err)
		unix.Close(dir)
	}
	return 0
}

// probePtrace: PTRACE_ATTACH and PTRACE_SEIZE to each PID, and reading its memory.
func probePtrace(args []string) int {
	for _, a := range args {
		pid, _ := strconv.Atoi(a)
		err := unix.PtraceAttach(pid)
		report("ptrace attach "+a, err)
		if err == nil {
			_ = unix.PtraceDetach(pid)
		}
		_, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SEIZE, uintptr(pid), 0, 0, 0, 0)
		if e == 0 {
			report("ptrace seize "+a, nil)
			_ = unix.PtraceDetach(pid)
		} else {
			report("ptrace seize "+a, e)
		}
		f, err := os.OpenFile("/proc/"+a+"/mem", os.O_RDWR, 0)
		if err == nil {
			f.Close()
		}
		report("open /proc/"+a+"/mem read-write", err)
	}
	return 0
}

// probeKill: SIGKILL to each PID (host PIDs: must be ESRCH, the PID namespace hides them).
func probeKill(args []string) int {
	for _, a := range args {
		pid, _ := strconv.Atoi(a)
		err := unix.Kill(pid, unix.SIGKILL)
		if errors.Is(err, unix.ESRCH) {
			fmt.Printf("kill %s: ESRCH\n", a)
			continue
		}
		report("kill "+a, err)
	}
	return 0
}

// probeByUID: the calls that name their targets by user, not by PID, each aimed
// at every process of the caller's uid: setpriority(PRIO_USER) to the lowest
// priority and ioprio_set(IOPRIO_WHO_USER) to the idle I/O class. The kernel
// applies them to the processes the caller's PID namespace shows, so inside they
// succeed on the sandbox's own processes; the test then checks that the user's
// host processes kept their priorities.
func probeByUID(args []string) int {
	uid := os.Getuid()
	err := unix.Setpriority(unix.PRIO_USER, uid, 19)
	fmt.Printf("setpriority PRIO_USER %d: %v\n", uid, err)
	const ioprioSet, whoUser, classIdle = unix.SYS_IOPRIO_SET, 3, 3 << 13
	err = nil
	if _, _, e := unix.Syscall(ioprioSet, whoUser, uintptr(uid), classIdle); e != 0 {
		err = e
	}
	fmt.Printf("ioprio_set IOPRIO_WHO_USER %d: %v\n", uid, err)
	return 0
}

// probeAbstract: connect to an abstract unix socket (@name) and read its greeting.
func probeAbstract(args []string) int {
	for _, a := range args {
		c, err := net.DialTimeout("unix", "@"+a, 2*time.Second)
		if err != nil {
			fmt.Printf("abstract %s: unreachable: %v\n", a, err)
			continue
		}
		buf := make([]byte, 64)
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		n, _ := c.Read(buf)
		c.Close()
		fmt.Printf("abstract %s: CONNECTED %q\n", a, buf[:n])
	}
	return 0
}

// probeExe: rewrite the binary PID 1 runs (CVE-2019-5736): open /proc/1/exe for
// writing, directly and re-opened through an O_PATH fd, repeatedly while PID 1 lives;
// also the binary's own path when given.
func probeExe(args []string) int {
	targets := append([]string{"/proc/1/exe"}, args...)
	for _, p := range targets {
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err == nil {
			_, err = f.Write([]byte("#!/bin/sh\necho pwned\n"))
			f.Close()
		}
		report("open "+p+" for writing", err)
	}
	fd, err := unix.Open("/proc/1/exe", unix.O_PATH, 0)
	if err != nil {
		fmt.Printf("refused open /proc/1/exe O_PATH: %v\n", err)
		return 0
	}
	var last error
	for i := 0; i < 200; i++ {
		w, err := unix.Open("/proc/self/fd/"+strconv.Itoa(fd), unix.O_WRONLY, 0)
		if err == nil {
			_, err = unix.Write(w, []byte("pwned"))
			unix.Close(w)
			if err == nil {
				report("rewrite /proc/1/exe through O_PATH fd", nil)
				return 0
			}
		}
		last = err
		time.Sleep(time.Millisecond)
	}
	report("rewrite /proc/1/exe through O_PATH fd", last)
	return 0
}

// probeFds: every fd this process holds, opened again through /proc/self/fd for
// writing (files) or used as a directory to create a file in (directories).
func probeFds(args []string) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		fmt.Printf("readdir /proc/self/fd: %v\n", err)
		return 1
	}
	for _, e := range ents {
		p := "/proc/self/fd/" + e.Name()
		link, _ := os.Readlink(p)
		fmt.Printf("fd %s -> %s\n", e.Name(), link)
		fd, _ := strconv.Atoi(e.Name())
		if fd <= 2 {
			continue
		}
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil {
			continue
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			nfd, err := unix.Openat(fd, "agentbox-fd-escape", unix.O_CREAT|unix.O_WRONLY, 0o644)
			if err == nil {
				unix.Close(nfd)
			}
			report("create through directory fd "+e.Name()+" ("+link+")", err)
			continue
		}
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
		if err == nil {
			_, err = f.Write([]byte("escaped by fd\n"))
			f.Close()
		}
		report("write through fd "+e.Name()+" ("+link+")", err)
	}
	return 0
}

// probeFlip exchanges two paths with renameat2(RENAME_EXCHANGE) as fast as it can
// until killed: each exchange is atomic, so every observer sees one or the other.
// It prints how many exchanges it made when stdin closes.
func probeFlip(args []string) int {
	if len(args) != 2 {
		fmt.Fprintln(os.Stderr, "flip A B")
		return 2
	}
	stop := make(chan struct{})
	go func() {
		buf := make([]byte, 1)
		_, _ = os.Stdin.Read(buf)
		close(stop)
	}()
	n := 0
	for {
		select {
		case <-stop:
			fmt.Printf("flips %d\n", n)
			return 0
		default:
		}
		if err := unix.Renameat2(unix.AT_FDCWD, args[0], unix.AT_FDCWD, args[1], unix.RENAME_EXCHANGE); err != nil {
			// EBUSY while a session has a mount on one of them: keep trying.
			// ENOENT: the audit moved one aside; the test repairs and restarts.
			if !errors.Is(err, unix.EBUSY) {
				fmt.Fprintf(os.Stderr, "flip: %v\n", err)
				return 1
			}
		}
		n++
	}
}

// parentState is what a long-lived launching process holds: fds, mounts in its
// namespace, live threads and children, Go heap after a collection, resident memory.
type parentState struct {
	Fds, Mounts, Threads, Children int
	HeapKB, RSSKB                  int
}

func readParentState() parentState {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	var s parentState
	ents, _ := os.ReadDir("/proc/self/fd")
	s.Fds = len(ents)
	b, _ := os.ReadFile("/proc/self/mountinfo")
	s.Mounts = strings.Count(string(b), "\n")
	st, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(st), "\n") {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			s.Threads, _ = strconv.Atoi(strings.TrimSpace(v))
		}
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			s.RSSKB, _ = strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
		}
	}
	ch, _ := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/children", os.Getpid()))
	s.Children = len(strings.Fields(string(ch)))
	s.HeapKB = int(ms.HeapAlloc / 1024)
	return s
}

// settledParentState is readParentState once the last launch's init is reaped. That
// happens in the background after the launch returned (nsinit does not wait for its
// namespaces' teardown): a child gone a moment later is not a leak. The wait is
// bounded; children that leak stay, and grow with the launches.
func settledParentState() parentState {
	var s parentState
	sandboxtest.WaitForUpTo(20*time.Second, func() bool { s = readParentState(); return s.Children == 0 })
	return s
}

// probeLaunches is a long-lived parent using the Go API: `launches N BINARY REPO HOME`
// runs N sandbox.Run calls of /bin/true (BINARY is the agentbox binary re-executed
// as the init) after a warm-up, and prints its state before and after as JSON.
func probeLaunches(args []string) int {
	if len(args) != 4 {
		fmt.Fprintln(os.Stderr, "launches N BINARY REPO HOME")
		return 2
	}
	n, _ := strconv.Atoi(args[0])
	opts := sandbox.Options{Command: []string{"/bin/true"}, Repo: args[2], Dir: args[2], Home: args[3], InitBinary: args[1]}
	failures := 0
	var firstErr string
	launch := func() {
		res, err := sandbox.Run(opts)
		if err != nil || res.Status != 0 {
			failures++
			if firstErr == "" {
				firstErr = fmt.Sprintf("status %d: %v", res.Status, err)
			}
		}
	}
	for i := 0; i < 10; i++ {
		launch()
	}
	before := settledParentState()
	for i := 0; i < n; i++ {
		launch()
	}
	after := settledParentState()
	out, _ := json.Marshal(map[string]any{"before": before, "after": after, "failures": failures, "first_error": firstErr})
	fmt.Println(string(out))
	return 0
}
