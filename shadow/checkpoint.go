package shadow

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/agentbox/agentbox/internal/termsafe"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentbox/agentbox/internal/treewalk"
)

// Checkpoints: the working tree recorded in the middle of a session, at the
// sandbox's request (agentbox checkpoint). Each is a commit whose parent is the
// step before (the start commit for the first), and refs/steps/ID points at the
// newest: one ref per session, which prune removes with the session's. Step 0 is
// the start state, step N the N-th checkpoint.

// stepRefs prefixes the ref of a session's newest checkpoint.
const stepRefs = "refs/steps/"

// checkpointDeadline bounds one checkpoint's Git commands, as recordDeadline
// bounds a session's end.
var checkpointDeadline = time.Minute

// MaxCheckpointMessage bounds a checkpoint's message, in bytes as kept.
const MaxCheckpointMessage = 500

// Step is one checkpoint of a session, the body of its commit.
type Step struct {
	Session string    `json:"session"`
	N       int       `json:"step"`
	Message string    `json:"message,omitempty"`
	Time    time.Time `json:"time"`
	Files   Files     `json:"files"` // against the step before
	// NotRecorded and NotRecordedCount, as a Record's: what the step's tree does
	// not hold (files past the bounds), so that an undo to it lists them.
	NotRecorded      []Skipped `json:"not_recorded,omitempty"`
	NotRecordedCount int       `json:"not_recorded_count,omitempty"`
	ReadBytes        int64     `json:"read_bytes,omitempty"`
	Notes            []string  `json:"notes,omitempty"`

	Commit string `json:"-"` // filled in when read back
}

// ErrSessionEnded refuses a checkpoint once the session's end is being recorded.
var ErrSessionEnded = errors.New("the session has ended")

// CheckpointMessage makes a message from the sandbox fit to keep: valid UTF-8 on
// one line (control characters, NUL included, become '?'), at most
// MaxCheckpointMessage bytes. It is text only: nothing reads it as a path.
func CheckpointMessage(b []byte) string {
	var out strings.Builder
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		b = b[n:]
		if termsafe.Unsafe(r) {
			r = '?'
		}
		if out.Len()+utf8.RuneLen(r) > MaxCheckpointMessage {
			break
		}
		out.WriteRune(r)
	}
	return strings.TrimSpace(out.String())
}

// Checkpoint records the working tree as the session's next step, from w, the
// walk taken for it (nil: the recorder sweeps the tree), reading at most
// byteBound bytes of file content (0: maxRecordBytes). It returns the step.
func (ss *Session) Checkpoint(msg string, w *treewalk.Walk, byteBound int64) (Step, error) {
	if err := ss.Wait(); err != nil || ss.startCommit == "" {
		return Step{}, errors.New("the session's start state was not recorded")
	}
	ss.stepMu.Lock()
	defer ss.stepMu.Unlock()
	if ss.ended {
		return Step{}, ErrSessionEnded
	}
	s := ss.store
	unlock, err := s.lock()
	if err != nil {
		return Step{}, err
	}
	defer unlock()
	if byteBound <= 0 {
		byteBound = maxRecordBytes
	}
	s.deadline, s.byteBound = time.Now().Add(checkpointDeadline), byteBound
	defer func() { s.deadline, s.byteBound = time.Time{}, 0 }()
	tree, notes, err := s.snapshot(w)
	if err != nil {
		// What the staging read is counted against the session's bound all the same.
		return Step{ReadBytes: s.read}, err
	}
	parent, parentTree := ss.lastStep, ss.lastTree
	if parent == "" {
		parent, parentTree = ss.startCommit, ss.startTree
	}
	if w == nil {
		// No walk priced the staging (a directory the launcher cannot list leaves
		// it none): what it stored is what it read, at the least.
		if s.read, err = s.storedBytes(parentTree, tree); err != nil {
			s.read = byteBound
		}
	}
	st := Step{Session: ss.id, N: ss.steps + 1, Message: CheckpointMessage([]byte(msg)), Time: time.Now(), Notes: notes, ReadBytes: s.read}
	st.NotRecordedCount = len(s.skipped)
	st.NotRecorded = s.skipped[:min(len(s.skipped), maxNamed)]
	switch {
	case tree == parentTree:
	case s.delta.from == parentTree:
		st.Files = s.delta.files
	default:
		var gitlinks []string
		st.Files, gitlinks, err = s.countChanges(parentTree, tree)
		st.Notes = append(st.Notes, gitlinks...)
		if err != nil {
			st.Notes = append(st.Notes, "counting changed files: "+err.Error())
		}
	}
	body, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return Step{ReadBytes: st.ReadBytes}, err
	}
	subject := fmt.Sprintf("agentbox session %s: step %d", ss.id, st.N)
	if st.Message != "" {
		subject += ": " + oneLine(st.Message, 60)
	}
	commit, err := s.writeCommit(tree, parent, subject+"\n\n"+string(body)+"\n", st.Time)
	if err != nil {
		return Step{ReadBytes: st.ReadBytes}, err
	}
	if err := s.setRef(stepRefs+ss.id, commit, ss.lastStep); err != nil {
		return Step{ReadBytes: st.ReadBytes}, err
	}
	ss.lastStep, ss.lastTree, ss.steps = commit, tree, st.N
	st.Commit = commit
	return st, nil
}

// endSteps refuses every later checkpoint: the session's end is being recorded.
func (ss *Session) endSteps() {
	ss.stepMu.Lock()
	ss.ended = true
	ss.stepMu.Unlock()
}

// Steps lists the checkpoints of session rec, oldest first (none: nil).
func (s *Store) Steps(rec Record) ([]Step, error) {
	head, err := s.readRef(stepRefs + rec.ID)
	if err != nil || head == "" {
		return nil, err
	}
	// "COMMIT LF BODY NUL" for each commit from the newest step back to the
	// session's start commit, which is no step.
	args := []string{"log", "--first-parent", "-z", "--format=%H%n%b", head}
	if rec.StartCommit != "" {
		args = append(args, "^"+rec.StartCommit)
	}
	out, err := s.git.out(args...)
	if err != nil {
		return nil, fmt.Errorf("shadow: list the steps of %s: %w", rec.ID, err)
	}
	var steps []Step
	for entry := range strings.SplitSeq(out, "\x00") {
		commit, body, ok := strings.Cut(strings.TrimLeft(entry, "\n"), "\n")
		if !ok || !isHexID(commit) {
			continue
		}
		var st Step
		if err := json.Unmarshal([]byte(body), &st); err != nil || st.Session != rec.ID {
			continue
		}
		st.Commit = commit
		steps = append(steps, st)
	}
	for i, j := 0, len(steps)-1; i < j; i, j = i+1, j-1 {
		steps[i], steps[j] = steps[j], steps[i]
	}
	for i := range steps {
		if steps[i].N != i+1 {
			return nil, fmt.Errorf("shadow: the steps of %s are not numbered 1 to %d", rec.ID, len(steps))
		}
	}
	return steps, nil
}

// ParseStep splits "ID@N" into the session id and the step (-1: none given).
func ParseStep(arg string) (id string, step int, err error) {
	id, n, ok := strings.Cut(arg, "@")
	if !ok {
		return arg, -1, nil
	}
	step, err = strconv.Atoi(n)
	if err != nil || step < 0 || n != strconv.Itoa(step) {
		return "", 0, fmt.Errorf("%q: want SESSION@N, N a step number (0: the start; agentbox log lists the steps)", arg)
	}
	return id, step, nil
}

// AtStep is rec seen from its step n: StartCommit is that step's commit, so that
// PlanUndo puts the tree back as it was then and Diff shows what the session
// changed after it. Step 0 is rec itself.
func (s *Store) AtStep(rec Record, n int) (Record, Step, error) {
	if n == 0 {
		return rec, Step{Session: rec.ID, Time: rec.Start, Commit: rec.StartCommit}, nil
	}
	steps, err := s.Steps(rec)
	if err != nil {
		return Record{}, Step{}, err
	}
	if n > len(steps) {
		return Record{}, Step{}, fmt.Errorf("session %s has %d steps (checkpoints): no step %d", rec.ID, len(steps), n)
	}
	st := steps[n-1]
	rec.StartCommit = st.Commit
	return rec, st, nil
}

// DiffStep writes what step n (at least 1) of rec changed against the step before.
func (s *Store) DiffStep(w io.Writer, rec Record, n int, stat bool) error {
	if n < 1 {
		return fmt.Errorf("step 0 of %s is the session's start: diff %s shows what the whole session changed", rec.ID, rec.ID)
	}
	prev, _, err := s.AtStep(rec, n-1)
	if err != nil {
		return err
	}
	_, st, err := s.AtStep(rec, n)
	if err != nil {
		return err
	}
	r := prev
	r.EndCommit = st.Commit
	return s.Diff(w, r, stat)
}

// stepLeftOut says whether the step commit's record left files out, "" when it
// holds the whole tree; "no step" when commit is not a step's.
func (s *Store) stepLeftOut(commit string) (string, bool) {
	body, err := s.git.out("log", "-1", "--format=%b", commit)
	if err != nil {
		return "its record cannot be read", true
	}
	var st Step
	if json.Unmarshal([]byte(body), &st) != nil || st.Session == "" {
		return "", false
	}
	if st.NotRecordedCount > 0 {
		return fmt.Sprintf("step %d left %d files out", st.N, st.NotRecordedCount), true
	}
	return "", true
}

// WithSteps lists the ids of the sessions in s that have checkpoints.
func (s *Store) WithSteps() (map[string]bool, error) {
	out, err := s.git.out("for-each-ref", "--format=%(refname)", stepRefs)
	if err != nil {
		return nil, fmt.Errorf("shadow: list checkpoints in %s: %w", s.Dir, err)
	}
	ids := map[string]bool{}
	for line := range strings.SplitSeq(out, "\n") {
		if id, ok := strings.CutPrefix(line, stepRefs); ok && id != "" {
			ids[id] = true
		}
	}
	return ids, nil
}

// storedBytes is the content of the regular files that differ between the trees
// from and to: what a staging that changed from into to read and stored, at least.
func (s *Store) storedBytes(from, to string) (int64, error) {
	if from == to {
		return 0, nil
	}
	noIndex := "GIT_INDEX_FILE=" + s.Dir + "/agentbox-no-index"
	out, err := s.git.runEnv([]string{noIndex}, nil, "diff-tree", "-r", "-z", "--no-renames", "--no-textconv", "--no-ext-diff", "--raw", from, to)
	if err != nil {
		return 0, err
	}
	var ids strings.Builder
	fields := strings.Split(string(out), "\x00")
	for i := 0; i+1 < len(fields); i += 2 {
		meta := strings.Fields(strings.TrimPrefix(fields[i], ":"))
		if len(meta) != 5 {
			return 0, fmt.Errorf("shadow: unexpected diff-tree output %q", fields[i])
		}
		if (meta[1] == "100644" || meta[1] == "100755") && isOID(meta[3]) && strings.Trim(meta[3], "0") != "" {
			ids.WriteString(meta[3] + "\n")
		}
	}
	if ids.Len() == 0 {
		return 0, nil
	}
	sizes, err := s.git.run(strings.NewReader(ids.String()), "cat-file", "--batch-check=%(objectsize)")
	if err != nil {
		return 0, err
	}
	var n int64
	for line := range strings.SplitSeq(strings.TrimSpace(string(sizes)), "\n") {
		size, err := strconv.ParseInt(line, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("shadow: the size of a staged file: %q", line)
		}
		n += size
	}
	return n, nil
}
