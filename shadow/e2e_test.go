package shadow_test

// End-to-end: sessions run through the real agentbox binary, as the unprivileged test
// user, and are read back with agentbox log, show and diff.

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// box is sandboxtest's fixture with files for the record to see: one to edit, one to
// remove, one to keep, and an ignored pattern.
type box struct {
	*sandboxtest.Box
	t       *testing.T
	home    string
	repo    string
	backend string
}

func newBox(t *testing.T, backend string) *box {
	t.Helper()
	sb := sandboxtest.NewBox(t, backend)
	for name, content := range map[string]string{"edit.txt": "old\n", "gone.txt": "bye\n", "keep.txt": "keep\n", ".gitignore": "*.log\n"} {
		sandboxtest.WriteFile(t, filepath.Join(sb.Repo, name), content)
	}
	testenv.Chown(t, sb.Repo)
	testenv.Git(t, sb.Home, sb.Repo, "add", "-A")
	testenv.Git(t, sb.Home, sb.Repo, "commit", "-q", "-m", "init")
	return &box{Box: sb, t: t, home: sb.Home, repo: sb.Repo, backend: backend}
}

// run runs agentbox with args in the repository and returns stdout, stderr, status.
func (b *box) run(args ...string) (string, string, int) {
	b.t.Helper()
	r := sandboxtest.Run(b.Agentbox(b.repo, args...))
	if r.Code == -1 {
		b.t.Fatal(r.Stderr)
	}
	return r.Stdout, r.Stderr, r.Code
}

// must runs agentbox and fails the test unless it exits 0.
func (b *box) must(args ...string) string {
	b.t.Helper()
	out, errOut, code := b.run(args...)
	if code != 0 {
		b.t.Fatalf("agentbox %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// exec runs a shell script in the sandbox and returns the session id that agentbox
// log shows for it. The script's own exit status is the test's business; 125
// (agentbox failed) fails the test.
func (b *box) exec(script string, extra ...string) string {
	b.t.Helper()
	args := append([]string{"exec", "--backend", b.backend, "--no-git-save"}, extra...)
	out, errOut, code := b.run(append(args, "--", "/bin/sh", "-c", script)...)
	if code == 125 {
		b.t.Fatalf("exec %q: exit %d\nstdout: %s\nstderr: %s", script, code, out, errOut)
	}
	if strings.Contains(errOut, "not recorded") {
		b.t.Fatalf("exec %q: %s", script, errOut)
	}
	return b.newestID()
}

var idRE = regexp.MustCompile(`(?m)^(\d{8}-\d{6}-[0-9a-f]{6})\s`)

func (b *box) newestID() string {
	b.t.Helper()
	out := b.must("log")
	m := idRE.FindStringSubmatch(out)
	if m == nil {
		b.t.Fatalf("agentbox log shows no session:\n%s", out)
	}
	return m[1]
}

func TestExecRecordsSession(t *testing.T) {
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := newBox(t, backend)
			id := b.exec(`echo new > edit.txt; rm gone.txt; echo hi > added.txt; printf 'b\000in' > blob.Bin
				echo noise > debug.log; ln -s /etc/passwd link; exit 7`)

			log := b.must("log")
			line := ""
			for l := range strings.SplitSeq(log, "\n") {
				if strings.HasPrefix(l, id) {
					line = l
				}
			}
			for _, want := range []string{backend, " 7 ", "+3 ~1 -1", "/bin/sh -c"} {
				if !strings.Contains(line, want) {
					t.Errorf("log line lacks %q:\n%s", want, log)
				}
			}

			show := b.must("show", id[:12])
			for _, want := range []string{"session      " + id, "repo         " + b.repo, "exit status  7",
				"files        3 added, 1 changed, 1 removed", "backend      " + backend} {
				if !strings.Contains(show, want) {
					t.Errorf("show lacks %q:\n%s", want, show)
				}
			}
			// The launch's timings are internal: shown with --timings (and --json).
			if strings.Contains(show, "phases") || !strings.Contains(b.must("show", "--timings", id[:12]), "phases") {
				t.Errorf("show prints phases only with --timings:\n%s", show)
			}
			js := b.must("show", "--json", id)
			for _, want := range []string{`"exit_status": 7`, `"command": [`, `"args": [`, `"complete": true`, `"start_commit": "`} {
				if !strings.Contains(js, want) {
					t.Errorf("show --json lacks %q:\n%s", want, js)
				}
			}

			diff := b.must("diff", id)
			for _, want := range []string{"-old\n+new\n", "deleted file mode 100644", "+hi\n", "new file mode 120000",
				"+/etc/passwd", "Binary files /dev/null and b/blob.Bin differ"} {
				if !strings.Contains(diff, want) {
					t.Errorf("diff lacks %q:\n%s", want, diff)
				}
			}
			if strings.Contains(diff, "debug.log") || strings.Contains(diff, "keep.txt") {
				t.Errorf("diff shows an ignored or unchanged file:\n%s", diff)
			}
			stat := b.must("diff", "--stat", id)
			if !strings.Contains(stat, "5 files changed") {
				t.Errorf("diff --stat:\n%s", stat)
			}
		})
	}
}

func TestExecNoRecord(t *testing.T) {
	b := newBox(t, "native")
	b.must("exec", "--no-record", "--no-git-save", "--", "/bin/sh", "-c", "echo x > x")
	_, errOut, code := b.run("log")
	if code != 0 || !strings.Contains(errOut, "no sessions recorded for "+b.repo) {
		t.Errorf("log after --no-record: exit %d, %s", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(b.home, ".local/state/agentbox/shadow")); err == nil {
		t.Error("--no-record created the shadow store")
	}
}

// TestFailedLaunchRecorded: agentbox fails after recording the start state (here:
// the metadata snapshot cannot be written); the session is recorded with the error.
func TestFailedLaunchRecorded(t *testing.T) {
	b := newBox(t, "native")
	_, errOut, code := b.run("exec", "--git-save-dir", "/proc/no-such-dir", "--", "/bin/true")
	if code != 125 {
		t.Fatalf("exec with an unwritable snapshot dir: exit %d, %s", code, errOut)
	}
	id := b.newestID()
	show := b.must("show", id)
	if !strings.Contains(show, "exit status  125") || !strings.Contains(show, "error        ") {
		t.Errorf("show of a failed launch:\n%s", show)
	}
	if log := b.must("log"); !strings.Contains(log, "125 (failed)") {
		t.Errorf("log of a failed launch:\n%s", log)
	}
}

// TestExecPlantsNeverRunOnHost plants, from inside the sandbox, everything through
// which the repository can make Git run a program (and, from the host, what the
// sandbox cannot write: .git/config and .git/hooks), then reads the session back.
// No marker may appear: nothing ran on the host.
func TestExecPlantsNeverRunOnHost(t *testing.T) {
	b := newBox(t, "native")
	markers := testenv.Dir(t, "markers")
	// The evil program: a script in the repository that leaves a marker.
	evil := filepath.Join(b.repo, ".git", "evil.sh")
	if err := os.WriteFile(evil, fmt.Appendf(nil, "#!/bin/sh\ntouch %s/\"$(basename \"$0\")-$$\"\ncat\n", markers), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(b.repo, ".git", "config"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "[core]\n\tfsmonitor = %[1]s\n\thooksPath = %[2]s/.git/hooks\n\tpager = %[1]s\n[filter \"evil\"]\n\tclean = %[1]s\n\tsmudge = %[1]s\n[diff \"evil\"]\n\ttextconv = %[1]s\n[diff]\n\texternal = %[1]s\n", evil, b.repo)
	f.Close()
	for _, h := range []string{"pre-commit", "post-commit", "reference-transaction", "post-index-change"} {
		if err := os.Symlink(evil, filepath.Join(b.repo, ".git", "hooks", h)); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Chown(t, b.repo)

	script := fmt.Sprintf(`set -e
		printf '* filter=evil diff=evil merge=evil text eol=crlf ident\n' > .gitattributes
		mkdir -p .git/info && printf '* filter=evil diff=evil\n' > .git/info/attributes
		mkdir bin && cp %[1]s bin/git && chmod 755 bin/git
		git init -q nested && cp %[1]s nested/.git/hooks/post-index-change
		git -C nested config core.fsmonitor %[1]s
		echo 'line $Id$' > edit.txt`, evil)
	id := b.exec(script)
	// The host's PATH for log/show/diff leads to the planted git first.
	cmd := testenv.Command(t, b.home, b.Bin, "diff", id)
	cmd.Dir = b.repo
	for i, e := range cmd.Env {
		if strings.HasPrefix(e, "PATH=") {
			cmd.Env[i] = "PATH=" + filepath.Join(b.repo, "bin") + ":bin:" + strings.TrimPrefix(e, "PATH=")
		}
	}
	diff, diffErr := cmd.CombinedOutput()
	b.run("log")
	b.run("show", id)
	b.run("diff", "--stat", id)
	if ents, _ := os.ReadDir(markers); len(ents) > 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("programs planted in the repository ran on the host: %v", names)
	}
	if diffErr != nil {
		t.Fatalf("diff: %v\n%s", diffErr, diff)
	}
	if !strings.Contains(string(diff), "+line $Id$\n") {
		t.Errorf("the recorded content was filtered or the diff converted:\n%s", diff)
	}
}

// TestExecUnreadableFileNoted: a file the agent made unreadable is left out and
// named; the rest of the session is recorded.
func TestExecUnreadableFileNoted(t *testing.T) {
	b := newBox(t, "native")
	id := b.exec(`echo secret > locked; chmod 000 locked; echo v > visible`)
	show := b.must("show", id)
	if !strings.Contains(show, "files        1 added") || !strings.Contains(show, "locked") {
		t.Errorf("show:\n%s", show)
	}
	if diff := b.must("diff", id); !strings.Contains(diff, "+v\n") || strings.Contains(diff, "secret") {
		t.Errorf("diff:\n%s", diff)
	}
}

func TestConcurrentExecsBothRecorded(t *testing.T) {
	b := newBox(t, "native")
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := testenv.Command(t, b.home, b.Bin, "exec", "--no-git-save", "--", "/bin/sh", "-c", fmt.Sprintf("echo %d > f%d; sleep 0.3", i, i))
			cmd.Dir = b.repo
			if out, err := cmd.CombinedOutput(); err != nil || strings.Contains(string(out), "not recorded") {
				t.Errorf("exec %d: %v\n%s", i, err, out)
			}
		}()
	}
	wg.Wait()
	log := b.must("log")
	if n := len(idRE.FindAllString(log, -1)); n != 2 {
		t.Errorf("%d sessions logged, want 2:\n%s", n, log)
	}
}

func TestShowUnknownID(t *testing.T) {
	b := newBox(t, "native")
	for _, id := range []string{"20000101-000000-abcdef", "../etc"} {
		_, errOut, code := b.run("show", id)
		if code != 125 || strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(errOut, "agentbox: show: ") {
			t.Errorf("show %s: exit %d, %q", id, code, errOut)
		}
	}
}

// TestKilledLauncherLeavesStartState: a session whose launcher is killed shows as
// running while it runs and as unfinished after, with its start state recorded.
func TestKilledLauncherLeavesStartState(t *testing.T) {
	b := newBox(t, "native")
	cmd := testenv.Command(t, b.home, b.Bin, "exec", "--no-git-save", "--", "/bin/sh", "-c", "sleep 20")
	cmd.Dir = b.repo
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	running := false
	for range 200 { // a bound against hangs, not a timing assertion
		if out, _, _ := b.run("log"); strings.Contains(out, " running ") {
			running = true
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if !running {
		t.Fatal("agentbox log never showed the session as running")
	}
	log := b.must("log")
	if !strings.Contains(log, " unfinished ") || !strings.Contains(log, "/bin/sh -c 'sleep 20'") {
		t.Errorf("log after the launcher was killed:\n%s", log)
	}
	id := b.newestID()
	if show := b.must("show", id); !strings.Contains(show, "never recorded") {
		t.Errorf("show:\n%s", show)
	}
	if _, errOut, code := b.run("diff", id); code != 125 || !strings.Contains(errOut, "no end state") {
		t.Errorf("diff of an unfinished session: exit %d, %s", code, errOut)
	}
}

// TestExecWatchedEndScan runs sessions on a tree big enough for the launch's watch
// (session/audit.go: minWatchFiles) and checks, through the real binary, that the
// end scan took the launch's listings when it could, read the whole tree when it
// could not, and that the record and the audit saw every change either way: ten
// files edited in place (watched), a file written through a hard link made in a
// directory the session made and removed (the watch vouches for nothing: a
// red-team case), and a .git pointer planted in a quiet directory (watched).
func TestExecWatchedEndScan(t *testing.T) {
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := newBox(t, backend)
			for d := range 30 {
				if err := os.Mkdir(filepath.Join(b.repo, fmt.Sprintf("d%02d", d)), 0o755); err != nil {
					t.Fatal(err)
				}
				for i := range 70 {
					sandboxtest.WriteFile(t, filepath.Join(b.repo, fmt.Sprintf("d%02d/f%02d", d, i)), "content\n")
				}
			}
			testenv.Chown(t, b.repo)
			testenv.Git(t, b.home, b.repo, "add", "-A")
			testenv.Git(t, b.home, b.repo, "commit", "-q", "-m", "many")
			b.exec("true") // the first record, which no watch serves
			session := func(script string) (id, stderr string) {
				t.Helper()
				cmd := b.Agentbox(b.repo, "exec", "--backend", b.backend, "--no-git-save", "--", "/bin/sh", "-c", script)
				cmd.Env = append(cmd.Env, "AGENTBOX_TIMINGS=1")
				r := sandboxtest.Run(cmd)
				if r.Code != 0 {
					t.Fatalf("exec %q: exit %d\n%s", script, r.Code, r.Stderr)
				}
				return b.newestID(), r.Stderr
			}
			logLine := func(id string) string {
				for l := range strings.SplitSeq(b.must("log"), "\n") {
					if strings.HasPrefix(l, id) {
						return l
					}
				}
				return ""
			}

			id, stderr := session(`for d in 00 03 06 09 12 15 18 21 24 27; do echo edit >> d$d/f05; done`)
			if !strings.Contains(stderr, "host: end scan, from the watch") {
				t.Errorf("ten files edited: the end scan did not take the watch's listings:\n%s", stderr)
			}
			if l := logLine(id); !strings.Contains(l, "+0 ~10 -0") {
				t.Errorf("ten files edited: log line %q", l)
			}

			id, stderr = session(`mkdir d04/nd && ln d05/f01 d04/nd/a && echo evil >> d04/nd/a && rm -r d04/nd`)
			if !strings.Contains(stderr, "host: end scan, whole tree") {
				t.Errorf("a directory made: the end scan trusted the watch:\n%s", stderr)
			}
			if diff := b.must("diff", id); !strings.Contains(diff, "d05/f01") || !strings.Contains(diff, "+evil") {
				t.Errorf("the write through a link in a removed directory is not in the record:\n%s", diff)
			}

			_, stderr = session(`printf 'gitdir: /tmp/elsewhere\n' > d06/.git`)
			if !strings.Contains(stderr, "host: end scan, from the watch") {
				t.Errorf("a pointer planted: the end scan did not take the watch's listings:\n%s", stderr)
			}
			if !strings.Contains(stderr, "agentbox: audit:") || !strings.Contains(stderr, "d06/.git") {
				t.Errorf("the planted .git pointer was not reported:\n%s", stderr)
			}
		})
	}
}
