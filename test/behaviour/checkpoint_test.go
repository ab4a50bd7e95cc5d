package behaviour

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// checkpointScript is a session that takes two checkpoints with the real binary:
// step 1 after an edit, step 2 after a new file, a removal and a chmod, then
// changes more before it ends. A checkpoint refused as too soon (the last one
// took longer to record than usual: a loaded machine) is asked again, and only
// the one taken is printed.
const checkpointScript = `set -e
ckpt() {
	until out=$("$AB" checkpoint "$@" 2>&1); do
		case $out in *"too soon"*) sleep 0.1 ;; *) echo "$out" >&2; return 1 ;; esac
	done
	echo "$out" >&2
}
printf 'one\n' >> a.txt
ckpt first edit
printf 'new\n' > new.txt && rm gone.txt && chmod 755 tool
ckpt second step
printf 'late\n' > a.txt && mkdir d && printf 'x\n' > d/x && rm new.txt
`

// TestCheckpointSteps: checkpoints taken mid-session are steps of its record:
// log lists them, show and diff address them as SESSION@N, and undo --to SESSION@N
// puts the tree back as it was at each, byte for byte (and is undone in turn).
func TestCheckpointSteps(t *testing.T) {
	for _, backend := range backends(t) {
		t.Run(backend, func(t *testing.T) {
			b := newBox(t, backend)
			b.hostSh("printf 'a\\n' > a.txt && printf 'g\\n' > gone.txt && printf '#\\n' > tool && git add -A && git commit -qm base")
			start := treeState(t, b.repo)
			cmd := b.command(b.repo, nil, checkpointScript)
			cmd.Env = append(cmd.Env, "AB="+b.bin)
			r := run(cmd)
			if r.code != 0 || strings.Count(r.stderr, "agentbox: checkpoint: step ") != 2 {
				t.Fatalf("session with checkpoints: %s", r)
			}
			end := treeState(t, b.repo)
			id := b.lastID()
			log := run(b.fixture().Agentbox(b.repo, "log"))
			if !regexp.MustCompile(`(?m)^  @1 .* \+0 ~1 -0 +first edit$`).MatchString(log.stdout) ||
				!regexp.MustCompile(`(?m)^  @2 .* \+1 ~1 -1 +second step$`).MatchString(log.stdout) {
				t.Fatalf("agentbox log does not list the steps:\n%s", log)
			}
			if s := run(b.fixture().Agentbox(b.repo, "show", id+"@2")); s.code != 0 || !strings.Contains(s.stdout, "second step") {
				t.Fatalf("show %s@2: %s", id, s)
			}
			d := run(b.fixture().Agentbox(b.repo, "diff", id+"@1"))
			if d.code != 0 || !strings.Contains(d.stdout, "+one") || strings.Contains(d.stdout, "new.txt") {
				t.Fatalf("diff %s@1 (the edit alone): %s", id, d)
			}
			d = run(b.fixture().Agentbox(b.repo, "diff", "--stat", id+"@2"))
			if d.code != 0 || !strings.Contains(d.stdout, "new.txt") || !strings.Contains(d.stdout, "gone.txt") || strings.Contains(d.stdout, "a.txt") {
				t.Fatalf("diff %s@2: %s", id, d)
			}
			for _, bad := range []string{id + "@3", id + "@x", id + "@-1"} {
				if r := run(b.fixture().Agentbox(b.repo, "diff", bad)); r.code != 125 {
					t.Errorf("diff %s: want exit 125: %s", bad, r)
				}
			}

			// Step 2, then step 1, each undone back to the end.
			if r := b.undo("--to", id+"@2"); r.code != 0 {
				t.Fatalf("undo --to %s@2: %s", id, r)
			}
			at2 := treeState(t, b.repo)
			if !strings.Contains(at2, "new.txt file 644 \"new\\n\"") || !strings.Contains(at2, "tool file 755") ||
				strings.Contains(at2, "gone.txt") || strings.Contains(at2, "d/x") || !strings.Contains(at2, "a.txt file 644 \"a\\none\\n\"") {
				t.Fatalf("after undo --to @2 the tree is\n%s", at2)
			}
			if r := b.undo(); r.code != 0 || treeState(t, b.repo) != end {
				t.Fatalf("undo of the undo --to @2: %s\n%s", r, treeState(t, b.repo))
			}
			if r := b.undo(id + "@1"); r.code != 0 {
				t.Fatalf("undo %s@1: %s", id, r)
			}
			at1 := treeState(t, b.repo)
			if !strings.Contains(at1, "a.txt file 644 \"a\\none\\n\"") || !strings.Contains(at1, "gone.txt") || strings.Contains(at1, "new.txt") ||
				!strings.Contains(at1, "tool file 644") {
				t.Fatalf("after undo --to @1 the tree is\n%s", at1)
			}
			if r := b.undo(); r.code != 0 || treeState(t, b.repo) != end {
				t.Fatalf("undo of the undo --to @1: %s", r)
			}
			if r := b.undo("--to", id+"@0"); r.code != 0 || treeState(t, b.repo) != start {
				t.Fatalf("undo --to %s@0 (the start): %s\n%s", id, r, treeState(t, b.repo))
			}
		})
	}
}

// TestCheckpointOutsideASession: with no record (--no-record) there is no
// endpoint, and a value of AGENTBOX_CHECKPOINT from outside never reaches the
// sandbox; outside any session the command refuses (125), --hook is quiet (0).
func TestCheckpointOutsideASession(t *testing.T) {
	b := newBox(t, backends(t)[0])
	cmd := b.command(b.repo, []string{"--no-record"}, `echo "[$AGENTBOX_CHECKPOINT]"; "$AB" checkpoint x; echo "status $?"`)
	cmd.Env = append(cmd.Env, "AB="+b.bin, "AGENTBOX_CHECKPOINT=/tmp/elsewhere")
	r := run(cmd)
	if r.code != 0 || !strings.Contains(r.stdout, "[]\nstatus 125") || !strings.Contains(r.stderr, "not inside a recorded agentbox session") {
		t.Fatalf("checkpoint in a session without a record: %s", r)
	}
	if r := run(b.fixture().Agentbox(b.repo, "checkpoint", "x")); r.code != 125 {
		t.Fatalf("checkpoint outside a session: %s", r)
	}
	hook := b.fixture().Agentbox(b.repo, "checkpoint", "--hook")
	hook.Stdin = strings.NewReader(`{"hook_event_name":"PostToolUse","tool_name":"Edit"}`)
	if r := run(hook); r.code != 0 || r.stderr != "" {
		t.Fatalf("checkpoint --hook outside a session: %s", r)
	}
	if _, err := os.Stat(filepath.Join(b.repo, "x")); err == nil {
		t.Fatal("a checkpoint message became a file")
	}
}
