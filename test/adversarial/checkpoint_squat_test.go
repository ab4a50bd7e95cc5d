package adversarial

import (
	"bytes"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
)

// lockSquatter is another local user watching the host's /tmp: the moment a
// checkpoint endpoint directory of the launcher with PID target appears, it puts a
// FIFO where that directory's claim (DIR.lock) goes, before the launcher links its
// lock there. It counts the names it took.
type lockSquatter struct {
	fd     int
	target atomic.Int64
	won    atomic.Int64
	done   chan struct{}
	made   []string // the FIFOs it put in /tmp, for the cleanup once done
}

func startLockSquatter(t *testing.T) *lockSquatter {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unix.InotifyAddWatch(fd, "/tmp", unix.IN_CREATE); err != nil {
		unix.Close(fd)
		t.Fatal(err)
	}
	s := &lockSquatter{fd: fd, done: make(chan struct{})}
	go s.run()
	t.Cleanup(func() {
		unix.Close(s.fd) // ends the read
		<-s.done
		for _, p := range s.made {
			unix.Unlink(p)
		}
	})
	return s
}

func (s *lockSquatter) run() {
	defer close(s.done)
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(s.fd, buf)
		if err != nil || n <= 0 {
			return
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := string(bytes.TrimRight(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+int(ev.Len)], "\x00"))
			off += unix.SizeofInotifyEvent + int(ev.Len)
			pid := s.target.Load()
			if pid > 0 && strings.HasPrefix(name, "agentbox-checkpoint-"+strconv.FormatInt(pid, 10)+"-") && !strings.HasSuffix(name, ".lock") {
				lock := filepath.Join("/tmp", name+".lock")
				if unix.Mkfifo(lock, 0o644) == nil {
					s.made = append(s.made, lock)
					s.won.Add(1)
				}
			}
		}
	}
}

// TestCheckpointLockSquatted: another local user who wins the race for the name of
// a session's checkpoint claim in the host's /tmp does not take agentbox
// checkpoint away from that session, on every backend.
func TestCheckpointLockSquatted(t *testing.T) {
	sq := startLockSquatter(t)
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			before := sq.won.Load()
			// The squatter wins the race only at times: launch until it has.
			for i := 0; i < 10 && sq.won.Load() == before; i++ {
				cmd := b.Command(b.Repo, nil, `echo x >> f; "$AB" checkpoint squat`)
				cmd.Env = append(cmd.Env, "AB="+b.Bin)
				res := make(chan sandboxtest.Result, 1)
				if err := sandboxtest.StartAndCollect(cmd, res); err != nil {
					t.Fatal(err)
				}
				sq.target.Store(int64(cmd.Process.Pid))
				r := <-res
				sq.target.Store(0)
				if r.Code != 0 || strings.Contains(r.Stderr, "will not work") || !strings.Contains(r.Stderr, "checkpoint: step 1 ") {
					t.Fatalf("launch %d, its checkpoint claim squatted %d times in all: %s", i+1, sq.won.Load()-before, r)
				}
			}
			if sq.won.Load() == before {
				t.Fatal("the squatter never won the race in 10 launches: the test proves nothing")
			}
		})
	}
}
