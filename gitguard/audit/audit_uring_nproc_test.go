package audit

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/internal/uringstat"
)

// TestRingAtTaskLimit: at the user's RLIMIT_NPROC, io-wq cannot start the worker a
// statx needs; it retries for about 50 ms and cancels the batch (ECANCELED), every
// batch. The walk must give the ring up at the first such batch, not pay 50 ms for
// each 64 entries (73 s for 100,000 files) before each falls back to fstatat. The
// test runs itself again as root in a child, which makes its threads, sets
// RLIMIT_NPROC to their count and becomes an unprivileged user (whose threads now
// fill the limit) before lstat'ing a directory of 640 entries through a ring.
func TestRingAtTaskLimit(t *testing.T) {
	const env = "AGENTBOX_TEST_RING_AT_TASK_LIMIT"
	if os.Getenv(env) == "" {
		if os.Geteuid() != 0 {
			testenv.Skip(t, "becoming a user at its task limit needs root")
		}
		if r, err := uringstat.New(ringEntries); err != nil {
			testenv.Skip(t, "no io_uring for the walk here: %v", err)
		} else {
			r.Close()
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestRingAtTaskLimit$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), env+"="+t.TempDir(), "GOMAXPROCS=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		t.Logf("child:\n%s", out)
		return
	}

	dir := filepath.Join(os.Getenv(env), "d")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 640 {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%03d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	r := &direntReader{fd: fd}
	var ents []os.DirEntry
	for {
		batch, err := r.next(1000)
		ents = append(ents, batch...)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	want := make([]entryStat, len(ents))
	if _, _, ok := statAll(fd, ents, want, 1, nil); !ok {
		t.Fatal("fstatat failed")
	}

	// Threads enough for the Go runtime's needs from here on, left idle.
	var ready, done sync.WaitGroup
	release := make(chan struct{})
	for range 16 {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			runtime.LockOSThread()
			ready.Done()
			<-release
			runtime.UnlockOSThread()
		}()
	}
	ready.Wait()
	close(release)
	done.Wait()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	limit := uint64(len(tasks))
	if err := unix.Setrlimit(unix.RLIMIT_NPROC, &unix.Rlimit{Cur: limit, Max: limit}); err != nil {
		t.Fatal(err)
	}
	const nobody = 54329 // a uid no process has
	if err := syscall.Setresgid(nobody, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Setresuid(nobody, nobody, nobody); err != nil {
		t.Fatal(err)
	}

	pool := &ringPool{max: 1}
	got := make([]entryStat, len(ents))
	_, _, ok := statAll(fd, ents, got, 1, pool)
	pool.close()
	if !ok || !reflect.DeepEqual(got, want) {
		t.Fatalf("at the task limit: ok %v, answers equal %v", ok, reflect.DeepEqual(got, want))
	}
	if !pool.refused {
		t.Errorf("the ring whose batches io-wq cancelled went on being used (%d entries answered)", pool.answered.Load())
	}
	t.Logf("%d threads, limit %d: ring given up %v, %d answered by it", len(tasks), limit, pool.refused, pool.answered.Load())
}
