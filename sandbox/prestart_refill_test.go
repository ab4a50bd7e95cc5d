package sandbox

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// Prestart's spares run its InitBinary on the host, before any plan, each time a
// launch has used one up. A Run with another init (here the program itself) does
// not check Prestart's binary against its session, and the refill after it looked
// at the binary without the session's grants: a session of a plain (non-Git)
// directory holding it replaced it, and the refill ran what it planted (a script,
// before the init was executed through its descriptor; an ELF file since). The
// refill (and Prestart) now check it against every directory a session of the
// program could write, through Run and through a Launcher.
func TestPrestartRefillAfterASessionThatCouldWriteItsBinary(t *testing.T) {
	bin := testenv.Binary(t) // built before switching users: the build needs root's cache
	if os.Getenv("AGENTBOX_BINARY") == "" {
		t.Setenv("AGENTBOX_BINARY", bin)
	}
	if !asTestUser(t) {
		return
	}
	for _, door := range []string{"Run", "Launcher"} {
		t.Run(door, func(t *testing.T) {
			dir, err := filepath.EvalSymlinks(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			init := filepath.Join(dir, "bin", "agentbox")
			if err := os.MkdirAll(filepath.Dir(init), 0o755); err != nil {
				t.Fatal(err)
			}
			copyExecutable(t, bin, init)
			marker := filepath.Join(t.TempDir(), "planted init ran")
			defer StopPrestart()
			if err := Prestart(Options{InitBinary: init}); err != nil {
				t.Fatalf("Prestart with an InitBinary no session could write yet: %v", err)
			}
			run := Run
			if door == "Launcher" {
				l, err := NewLauncher("")
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
				run = l.Run
			}
			// The init starts in a user namespace of its own, unmapped: the planted
			// one maps the user's uid to itself, as the init does, and writes as the
			// user on the host.
			plant := fmt.Sprintf(`rm -f bin/agentbox && printf '#!/bin/sh\necho "%d %d 1" > /proc/self/uid_map\ntouch "%s"\n' > bin/agentbox && chmod 755 bin/agentbox`, os.Getuid(), os.Getuid(), marker)
			res, err := run(Options{Command: []string{"/bin/sh", "-c", plant}, Repo: dir, Dir: dir, NoGitSave: true, NoRecord: true, Log: io.Discard})
			if err != nil || res.Status != 0 {
				t.Fatalf("the session: status %d, %v", res.Status, err)
			}
			if door == "Launcher" {
				// A Launcher's session uses no spare; the next Run refills.
				if _, err := Run(Options{Command: []string{"true"}, Repo: dir, Dir: dir, NoGitSave: true, NoRecord: true, Log: io.Discard}); err != nil {
					t.Fatal(err)
				}
			}
			// The refill after the last Run, if it started a spare: its exec done,
			// wait until that spare has ended or left its mark.
			spares.Lock()
			pending := spares.next
			spares.Unlock()
			if pending != nil {
				// A script no longer runs as the init (it is executed through a
				// descriptor its interpreter cannot open), an ELF file would.
				t.Error("Prestart refilled its spare from a binary a session of the program could have replaced")
				<-pending.done
				if pending.p != nil {
					pid := pending.p.PID()
					sandboxtest.WaitForUpTo(sandboxtest.GoneBound, func() bool { return exists(marker) || ended(pid) })
				}
			}
			StopPrestart()
			if exists(marker) {
				t.Fatal("a Prestart spare ran the init binary a session had replaced")
			}
			if err := Prestart(Options{InitBinary: init}); err == nil {
				t.Error("Prestart accepted an InitBinary in a directory a session of this program could write")
			}
		})
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// ended reports whether pid has exited (gone, or a zombie not yet reaped).
func ended(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) == 0 || f[0] == "Z"
}
