package shadow

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/treewalk"
)

// emptyTree is the id of Git's empty tree (SHA-1 object format).
const emptyTree = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"

// Record is one session's record, the body of its end commit.
type Record struct {
	ID             string    `json:"id"`
	Repo           string    `json:"repo"`
	Command        []string  `json:"command"` // what ran inside
	Args           []string  `json:"args"`    // the arguments of agentbox exec, as given
	Backend        string    `json:"backend"`
	BackendVersion string    `json:"backend_version,omitempty"`
	Policy         Policy    `json:"policy"`
	Start          time.Time `json:"start"`
	End            time.Time `json:"end,omitzero"`
	// ExitStatus is agentbox exec's exit status: the command's, 128+N for signal N,
	// 125 when agentbox failed (Error says why).
	ExitStatus int    `json:"exit_status"`
	Error      string `json:"error,omitempty"`
	// KilledLeft is how many processes of the sandbox were still running when the
	// command ended (background jobs), which agentbox killed.
	KilledLeft int     `json:"killed_left_running,omitempty"`
	Phases     []Phase `json:"phases,omitempty"` // setup timings measured by the launcher
	// Snapshot is the P8 snapshot record; the key keeps the name records of
	// older versions, which saved a ZIP, were written with.
	Snapshot      string   `json:"snapshot_zip,omitempty"`
	AuditFindings []string `json:"audit_findings,omitempty"`
	Files         Files    `json:"files"`

	// NotRecorded names what the end state does not hold though the working tree
	// has it, and why (price.go, unseen.go): files the recorder would not read, and
	// what the session changed that Git cannot store. At most maxNamed entries;
	// NotRecordedCount counts them all.
	NotRecorded      []Skipped `json:"not_recorded,omitempty"`
	NotRecordedCount int       `json:"not_recorded_count,omitempty"`
	// Ignored names the first files the session changed that the repository's
	// .gitignore files keep out of the record; IgnoredCount counts them all.
	Ignored      []string `json:"ignored,omitempty"`
	IgnoredCount int      `json:"ignored_count,omitempty"`
	// ReadBytes is the content the end's staging let be read (price.go).
	ReadBytes int64 `json:"read_bytes,omitempty"`
	// Perms are the permission bits of the files the session changed or removed,
	// at its start and end (perms.go); PermsKnown says the list is whole.
	Perms      []Perm `json:"perms,omitempty"`
	PermsKnown bool   `json:"perms_known,omitempty"`
	// DirsMade and DirsGone are the directories the session made and removed
	// (dirs.go); DirsKnown says the lists are whole.
	DirsMade  []DirChange `json:"dirs_made,omitempty"`
	DirsGone  []DirChange `json:"dirs_gone,omitempty"`
	DirsKnown bool        `json:"dirs_known,omitempty"`

	// NetRefusals are the requests the --allow-net proxy refused.
	NetRefusals []NetRefusal `json:"net_refusals,omitempty"`
	// SSHAgent are the requests the --ssh-agent filter decided on: every
	// signature request, and every refused request.
	SSHAgent []SSHAgentEvent `json:"ssh_agent,omitempty"`
	// Usage is what the session's processes used, nil when nothing was measured.
	Usage *Usage `json:"usage,omitempty"`
	// Ports are the --host-port and --publish forwardings and what each relayed.
	Ports []PortForward `json:"ports,omitempty"`

	// Complete is false in the start commit's record and true in the end commit's;
	// a session whose ref still points at its start commit never finished (the
	// launcher was killed, or the session is still running).
	Complete bool `json:"complete"`
	// Notes are what the collector could not record, or recorded only in part:
	// unreadable files, embedded repositories, a repository that vanished.
	Notes       []string `json:"notes,omitempty"`
	LauncherPID int      `json:"launcher_pid,omitempty"`
	UID         int      `json:"uid"`
	Host        string   `json:"host,omitempty"`

	// Filled in when a record is read back from its refs; whatever a stored record
	// says here is ignored.
	StartCommit string `json:"start_commit,omitempty"` // "" when the start state could not be recorded
	EndCommit   string `json:"end_commit,omitempty"`   // "" while the session is incomplete
}

// Policy is the part of the sandbox policy the record keeps.
type Policy struct {
	Repo     string `json:"repo"`
	Home     string `json:"home,omitempty"`
	Workdir  string `json:"workdir"`
	Offline  bool   `json:"offline"`
	DiskTmp  bool   `json:"disk_tmp"`
	Backend  string `json:"backend"` // as asked for (auto, native, bwrap)
	StateDir string `json:"state_dir"`
	CacheDir string `json:"cache_dir,omitempty"`

	// AllowNet are the --allow-net values.
	AllowNet []string `json:"allow_net,omitempty"`
	// SSHAgent: the session had --ssh-agent's filter, letting SSHKeys through
	// (--ssh-key; none: every key).
	SSHAgent bool     `json:"ssh_agent,omitempty"`
	SSHKeys  []string `json:"ssh_keys,omitempty"`
	// HostPorts and Publish are the --host-port and --publish forwardings, as
	// PORT:HOSTPORT.
	HostPorts []string `json:"host_ports,omitempty"`
	Publish   []string `json:"publish,omitempty"`

	// Memory, Pids and MilliCPUs are the --memory (bytes), --pids and --cpus
	// (thousandths of a CPU) limits; 0: none.
	Memory    int64 `json:"memory,omitempty"`
	Pids      int64 `json:"pids,omitempty"`
	MilliCPUs int64 `json:"milli_cpus,omitempty"`
}

// Usage is what a session's processes used together, and where it was measured:
// Source "cgroup" (the session's cgroup counted every process of it), else why
// nothing was. -1: the kernel does not report it for the session's cgroup
// (memory.peak: Linux 5.19 and the memory controller; pids.peak: the pids
// controller on a recent kernel).
type Usage struct {
	Source     string `json:"source"`
	CPUUsec    int64  `json:"cpu_usec"`
	PeakMemory int64  `json:"peak_memory"`
	PeakTasks  int64  `json:"peak_tasks"`
	// Limit names the limit that ended or held back the command, "" none
	// ("memory limit 2G reached").
	Limit string `json:"limit,omitempty"`
	// Throttled counts the periods --cpus held the session back; -1 unknown.
	Throttled int64 `json:"throttled,omitempty"`
}

// PortForward is one --host-port ("host-port": 127.0.0.1:Inside in the sandbox to
// the host's 127.0.0.1:Host) or --publish ("publish": the other way) forwarding:
// the connections it relayed, those refused past the launcher's bound, and those
// whose far end could not be reached.
type PortForward struct {
	Kind        string `json:"kind"`
	Inside      int    `json:"inside"`
	Host        int    `json:"host"`
	Connections int    `json:"connections"`
	Refused     int    `json:"refused,omitempty"`
	Failed      int    `json:"failed,omitempty"`
}

// NetRefusal is one kind of request the --allow-net proxy refused: the host and port
// asked for (as the sandbox spelt them, made printable), why, and how often.
type NetRefusal struct {
	Host   string `json:"host"`
	Port   int    `json:"port"`
	Reason string `json:"reason"`
	Count  int    `json:"count"`
	Failed bool   `json:"failed,omitempty"` // allowed, but the host could not be reached
}

// SSHAgentEvent is one request to the --ssh-agent filter (sshagent.Event): what
// was asked ("sign", "session-bind", or a refused change such as "remove-all"), the
// key's fingerprint, the host the connection was bound to where known, and why it
// was refused.
type SSHAgentEvent struct {
	Time    time.Time `json:"time"`
	Op      string    `json:"op"`
	Key     string    `json:"key,omitempty"`
	Host    string    `json:"host,omitempty"`
	Allowed bool      `json:"allowed"`
	Reason  string    `json:"reason,omitempty"`
}

// Phase is one measured setup step.
type Phase struct {
	Name string `json:"name"`
	NS   int64  `json:"ns"`
}

// Files counts what the session changed, end state against start state. A path whose
// type changed (file to symlink, say) counts as changed.
type Files struct {
	Added   int `json:"added"`
	Changed int `json:"changed"`
	Removed int `json:"removed"`
}

// Session is a session being recorded: its start state is in the shadow repository.
type Session struct {
	store *Store
	id    string
	// started is closed once the start commit is written (or failed); the fields
	// below are not touched by Begin's goroutine after that.
	started     chan struct{}
	startCommit string // "" when the start state could not be recorded
	startTree   string
	startErr    error
	notes       []string
	// launch is the clock of the launch walk (zero: none): what changed since is
	// the session's (unseen.go).
	launch treewalk.Clock
	// perms are the launch walk's permission bits (perms.go); nil: unknown.
	perms map[string]uint16
	// dirs are the launch walk's directories and their bits (dirs.go); nil: unknown.
	dirs map[string]uint16

	// The checkpoints (checkpoint.go): the newest step's commit and tree, how
	// many, and whether the end is being recorded; under stepMu.
	stepMu             sync.Mutex
	lastStep, lastTree string
	steps              int
	ended              bool
}

// ID is the session's id.
func (ss *Session) ID() string { return ss.id }

// Begin records the repository's working tree as the start state of a new session.
// rec is the record as known at launch; Begin assigns rec.ID when it is empty.
//
// Begin returns as soon as the working tree is staged in the shadow index, which is
// all that must happen before the sandbox starts: the tree, the start commit and the
// session's ref are written in the background, while the session runs (Wait waits for
// them). The sandbox cannot reach the shadow repository, so nothing it does can
// change what is being committed.
//
// Begin always returns a usable Session. A non-nil error says the start state could
// not be recorded; the error is kept and Finish records it in the session's notes,
// with the end state as a commit without parent.
func (s *Store) Begin(rec Record) (*Session, error) { return s.BeginWalk(rec, nil) }

// BeginWalk is Begin with the walk of the working tree the audit took just before
// (nil: none): what changed since the last record is found from it (changed.go)
// instead of by a sweep of the whole tree.
func (s *Store) BeginWalk(rec Record, w *treewalk.Walk) (*Session, error) {
	if rec.ID == "" {
		rec.ID = newID(rec.Start)
	}
	ss := &Session{store: s, id: rec.ID, started: make(chan struct{})}
	fail := func(err error) (*Session, error) {
		ss.startErr = err
		ss.notes = append(ss.notes, "start state not recorded: "+err.Error())
		close(ss.started)
		return ss, err
	}
	unlock, err := s.lock()
	if err != nil {
		return fail(err)
	}
	if w != nil {
		ss.launch = w.Clock
		ss.perms = startPerms(w)
		ss.dirs = startDirs(w)
	}
	st, notes, err := s.stageWalk(w)
	for _, n := range notes {
		ss.notes = append(ss.notes, "start: "+n)
	}
	if n := len(s.skipped); n > 0 {
		ss.notes = append(ss.notes, fmt.Sprintf("start: %d files not recorded, as %s: %s", n, sanitize(s.skipped[0].Path), s.skipped[0].Reason))
	}
	if err != nil {
		unlock()
		return fail(err)
	}
	rec.Repo, rec.Complete, rec.Notes = s.Repo, false, append([]string(nil), ss.notes...)
	go func() {
		defer close(ss.started)
		defer unlock()
		tree, err := s.writeTree(st)
		var commit string
		if err == nil {
			commit, err = s.commit(tree, "", rec, "start state", rec.Start)
		}
		if err == nil {
			err = s.setRef(sessionRefs+rec.ID, commit, "")
		}
		if err != nil {
			ss.startErr = err
			ss.notes = append(ss.notes, "start state not recorded: "+err.Error())
			return
		}
		ss.startCommit, ss.startTree = commit, tree
		// Packing is checked here, beside the command, not after it, where the
		// launcher's exit waits: once the start is recorded, a failure to pack
		// costs disk, not the record. The session's own end adds at most one pack
		// and a few loose objects, which the next session's start checks.
		_ = s.maintain()
	}()
	return ss, nil
}

// Wait waits until the start state is committed and returns the error that kept it
// from being recorded, if any.
func (ss *Session) Wait() error {
	<-ss.started
	return ss.startErr
}

// Finish records the working tree as the session's end state, with rec as its
// record (Repo, Files, Complete and Notes are filled in here). A repository that
// vanished or cannot be read is not an error: the record says so in its notes and
// keeps the start state as the end state. An error means nothing could be written.
func (ss *Session) Finish(rec Record) error { return ss.FinishWalk(rec, nil) }

// FinishWalk is Finish with the walk of the working tree the audit's end took (nil:
// none), as BeginWalk.
func (ss *Session) FinishWalk(rec Record, w *treewalk.Walk) error {
	s := ss.store
	_ = ss.Wait() // a failure is in ss.notes
	ss.endSteps()
	rec.ID, rec.Repo, rec.Complete = ss.id, s.Repo, true
	rec.Notes = append(append([]string(nil), ss.notes...), rec.Notes...)
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()

	// The end of a session is bounded in time (price.go); the commit and its ref
	// are written in Go whatever is left of it.
	s.deadline, s.byteBound = time.Now().Add(recordDeadline), maxRecordBytes
	tree, notes, err := s.snapshot(w)
	for _, n := range notes {
		rec.Notes = append(rec.Notes, "end: "+n)
	}
	skipped := s.skipped
	if err != nil {
		rec.Notes = append(rec.Notes, "end state not recorded: "+err.Error())
		skipped = append(skipped, Skipped{Path: ".", Reason: "end state not recorded (the start state stands for it): " + err.Error()})
		tree = ss.startTree
		if tree == "" {
			tree = emptyTree
		}
	} else if w != nil {
		out, ignored, notes := s.unseen(w, ss.since(w, rec.Start))
		skipped = append(skipped, out...)
		rec.Notes = append(rec.Notes, notes...)
		rec.IgnoredCount = len(ignored)
		for _, p := range ignored[:min(len(ignored), maxIgnored)] {
			rec.Ignored = append(rec.Ignored, shortPath(p))
		}
		rec.Perms, rec.PermsKnown = endPerms(ss.perms, w, ss.since(w, rec.Start))
		rec.DirsMade, rec.DirsGone, rec.DirsKnown = endDirs(ss.dirs, w)
	} else {
		rec.Notes = append(rec.Notes, "no end walk: what Git could not store is not named")
	}
	rec.NotRecordedCount = len(skipped)
	rec.NotRecorded = skipped[:min(len(skipped), maxNamed)]
	rec.ReadBytes = s.read
	// Identical trees changed nothing (and name no nested repository the start
	// commit's notes did not); when the index held the start tree and only files
	// edited in place changed since, the staging counted what changed. Neither
	// runs a diff-tree process.
	switch {
	case ss.startTree == "" || tree == ss.startTree:
	case err == nil && s.delta.from == ss.startTree:
		rec.Files = s.delta.files
	default:
		var gitlinks []string
		rec.Files, gitlinks, err = s.countChanges(ss.startTree, tree)
		rec.Notes = append(rec.Notes, gitlinks...)
		if err != nil {
			rec.Notes = append(rec.Notes, "counting changed files: "+err.Error())
		}
	}
	s.deadline, s.byteBound = time.Time{}, 0
	end := rec.End
	if end.IsZero() {
		end = time.Now()
	}
	commit, err := s.commit(tree, ss.startCommit, rec, "", end)
	if err != nil {
		return err
	}
	// Packing is BeginWalk's, beside the command.
	return s.setRef(sessionRefs+ss.id, commit, ss.startCommit)
}

// since is the ctime from which an entry of the end walk w changed during the
// session: the launch walk's clock, else the session's start; 0 (everything) when
// the wall clock stepped back meanwhile.
func (ss *Session) since(w *treewalk.Walk, start time.Time) int64 {
	if ss.launch.Real == 0 {
		return start.UnixNano() - 2_000_000_000
	}
	t, ok := treewalk.Since(ss.launch, w.Clock, w.FineCtime)
	if !ok {
		return 0
	}
	return t
}

// snapshot stages the repository's working tree in the shadow index and returns its
// tree. Files Git could not read are left out and named in notes.
func (s *Store) snapshot(w *treewalk.Walk) (tree string, notes []string, err error) {
	st, notes, err := s.stageWalk(w)
	if err != nil {
		return "", notes, err
	}
	tree, err = s.writeTree(st)
	return tree, notes, err
}

// staged is what stageWalk left in the index.
type staged struct {
	tree    string         // the index's tree when known without write-tree, else ""
	clock   treewalk.Clock // the working tree's state the index holds is as of this clock
	added   treewalk.Clock // read just before the staging's `git add` (stageState.Added)
	fine    bool           // the filesystem stamps sub-second ctimes
	kept    bool           // nothing staged: the stage state on disk stays as it is
	ignores string         // ignoreSet of the walk staged from
	recent  []recentEntry  // stageState.Recent
}

// stageWalk makes the shadow index match the working tree: from the walk w when the
// stage state allows (changed.go), staging only what may have changed, else with
// the full sweep (stage).
func (s *Store) stageWalk(w *treewalk.Walk) (staged, []string, error) {
	s.leftOut, s.manyChanged = false, false
	s.delta.from = ""
	s.skipped, s.read = nil, 0
	fine := w != nil && w.FineCtime
	if st, ok := s.readStage(); ok && w != nil {
		if paths, err := s.changedPaths(st, w); err == nil {
			if len(paths) == 0 && !s.indexRead {
				// The index is untouched and the stage state still true: its older
				// clock only makes the next staging look at more, so it stays.
				return staged{tree: st.Tree, kept: true}, nil, nil
			}
			if len(paths) == 0 {
				// Nothing changed, but telling so took the index (entries within
				// the last staging's clock slack, checked one by one): the walk
				// showed the tree is the index's as of its clock, as a staging of
				// no path would, so the state moves to that clock (Added stays:
				// older is safer) and the next staging does not read it again.
				return staged{tree: st.Tree, clock: w.Clock, added: st.Added, fine: fine, ignores: ignoreSet(w, 0), recent: st.Recent}, nil, nil
			}
			s.dropStage()
			skip, read := s.price(w, paths) // price.go: what the staging may read
			s.read = read
			if len(skip) == 0 {
				if tree, changed, err := s.stageInPlace(paths); err == nil { // inplace.go: no Git for files edited in place
					s.delta.from, s.delta.files = st.Tree, Files{Changed: changed}
					return staged{tree: tree, clock: w.Clock, added: s.addedClock, fine: fine, ignores: ignoreSet(w, 0), recent: s.recent}, nil, nil
				}
			}
			// Git's stat check is not trusted with what the walk showed changed
			// (racy.go): a smudged entry is hashed.
			if s.smudgeUnlikeWalk(w, paths) == nil {
				if notes, err := s.stagePaths(paths, skip); err == nil {
					return staged{clock: w.Clock, added: s.addedClock, fine: fine, ignores: ignoreSet(w, 0)}, notes, nil
				}
			}
		}
	}
	s.dropStage()
	s.skipped = nil
	clock := treewalk.Now()
	if s.smudgeUnlikeWalk(w, nil) != nil {
		// An index the recorder cannot edit cannot be trusted to the second:
		// Git stages everything again, by content.
		if err := os.Remove(filepath.Join(s.Dir, "index")); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return staged{}, nil, err
		}
	}
	skip, read := s.price(w, nil)
	s.read = read
	notes, err := s.stage(skip)
	return staged{clock: clock, added: s.addedClock, fine: fine, ignores: ignoreSet(w, 0)}, notes, err
}

// writeTree returns the index's tree (write-tree when st does not know it) and
// records the stage state.
func (s *Store) writeTree(st staged) (string, error) {
	tree := st.tree
	if tree == "" {
		// write-tree rewrites the index (its cache tree) without a working tree to
		// check racy entries against: the index keeps its mtime (racy.go). No
		// index (nothing was ever staged: an empty tree) holds nothing racy.
		indexPath := filepath.Join(s.Dir, "index")
		var before unix.Stat_t
		err := unix.Lstat(indexPath, &before)
		had := err == nil
		if had || errors.Is(err, unix.ENOENT) {
			tree, err = s.git.out("write-tree")
		}
		if err == nil && had {
			err = keepIndexTime(indexPath, before.Mtim)
		}
		if err != nil {
			s.dropStage()
			return "", err
		}
	}
	switch {
	case st.kept:
	case s.leftOut:
		s.dropStage()
	default:
		s.writeStage(st.clock, st.added, st.fine, tree, st.ignores, st.recent)
	}
	return tree, nil
}

// stage makes the shadow index match the repository's working tree: new, changed and
// removed files, honouring .gitignore. Files Git could not read are left out and
// named in notes.
func (s *Store) stage(skip []Skipped) (notes []string, err error) {
	fi, err := os.Stat(s.Repo)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("repository %s: does not exist (removed during the session?)", s.Repo)
	}
	if err != nil {
		return nil, fmt.Errorf("repository %s: %w", s.Repo, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("repository %s: is no longer a directory", s.Repo)
	}
	wt := s.git
	wt.workTree = s.Repo
	// --ignore-errors: a file the agent made unreadable must not hide every other
	// change; Git adds the rest, exits 1 and names what it skipped.
	// Its warnings name what is recorded in part (an embedded repository: its
	// commit, not its files), even when it succeeds.
	// What a bound stopped it at is left out, and named (bounds.go).
	// core.bigFileThreshold=1 (set in addAll) sends every blob through Git's bulk
	// check-in, which streams them into one pack: a first record of 100,000 files
	// writes one pack of the compressed content instead of 100,000 loose objects of
	// at least a 4 KiB block each, and no fsync per object.
	// (Only here: elsewhere the threshold would make every diff "binary".)
	s.sweeps++
	first := s.firstRecord()
	n := s.noticeStart(first, "recording the working tree of "+s.Repo+" in the shadow repository for the first time")
	defer n.end()
	// Many new files: a head start in batches (prestage.go). Its stat data were
	// read after this clock, before the sweep's own.
	added := treewalk.Now()
	if (first || s.manyChanged) && s.preStage(wt, skip, n.step) {
		defer func() { s.addedClock = added }()
	}
	return s.add(wt, nil, skip)
}

// stagePaths is stage limited to paths (relative to the working tree): `git add
// --all` of just those, which must all exist or be tracked.
func (s *Store) stagePaths(paths []string, skip []Skipped) (notes []string, err error) {
	wt := s.git
	wt.workTree = s.Repo
	return s.add(wt, paths, skip)
}

// add runs addAll and sorts its outcome into notes and an error.
func (s *Store) add(wt git, paths []string, skip []Skipped) (notes []string, err error) {
	stderr, skipped, err := s.addAll(wt, paths, skip)
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			return skipped, err
		}
	}
	return append(skipped, gitMessages(string(stderr))...), nil
}

// gitMessages are the error and warning lines of Git's stderr, without hints: at
// most maxNamed of them, each cut to maxNameLen bytes, since the sandbox decides how
// many files Git complains about, and how long their names are.
func gitMessages(stderr string) []string {
	var msgs []string
	more := 0
	for line := range strings.SplitSeq(stderr, "\n") {
		if strings.HasPrefix(line, "error: ") || strings.HasPrefix(line, "warning: ") {
			if len(msgs) == maxNamed {
				more++
				continue
			}
			msgs = append(msgs, shortPath(line))
		}
	}
	if more > 0 {
		msgs = append(msgs, fmt.Sprintf("… and %d more lines from Git", more))
	}
	return msgs
}

// commit writes a commit of tree with parent (may be "") whose message is a subject
// line and the record as JSON.
func (s *Store) commit(tree, parent string, rec Record, what string, when time.Time) (string, error) {
	b, err := recordCommit(tree, parent, rec, what, when)
	if err != nil {
		return "", err
	}
	return s.writeObject("commit", b)
}

// recordCommit is the commit object's body that commit writes: the head, the
// subject line and the record, built in one buffer. The launcher runs with its
// collector off, so each copy of a record (a few KiB: a launch's phases are most of
// it) is fresh memory, paid for in page faults on the session's critical path.
func recordCommit(tree, parent string, rec Record, what string, when time.Time) ([]byte, error) {
	rec.StartCommit, rec.EndCommit = "", ""
	subject := "agentbox session " + rec.ID
	if what != "" {
		subject += ": " + what
	} else if len(rec.Command) > 0 {
		subject += ": " + oneLine(strings.Join(rec.Command, " "), 60)
	}
	b, err := appendCommitHead(make([]byte, 0, commitHeadLen+len(subject)+2), tree, parent, when)
	if err != nil {
		return nil, err
	}
	b = append(append(b, subject...), "\n\n"...)
	return appendRecordJSON(b, &rec)
}

// updateRef points ref at commit if it still points at old ("" means it must not
// exist yet).
func (s *Store) updateRef(ref, commit, old string) error {
	_, err := s.git.out("update-ref", "-m", "agentbox", ref, commit, old)
	return err
}

// countChanges counts added, changed and removed paths between two trees, and names
// the nested repositories among the added and changed: only their commit is recorded.
func (s *Store) countChanges(from, to string) (Files, []string, error) {
	var (
		f      Files
		notes  []string
		nested int // nested repositories past maxNamed
	)
	// The raw diff of two trees needs no index, yet diff-tree reads it (for
	// attributes), which on a big tree costs more than the diff: an index file
	// that does not exist is an empty one.
	noIndex := "GIT_INDEX_FILE=" + filepath.Join(s.Dir, "agentbox-no-index")
	s.diffTrees++
	out, err := s.git.runEnv([]string{noIndex}, nil, "diff-tree", "-r", "-z", "--no-renames", "--no-textconv", "--no-ext-diff", "--raw", from, to)
	if err != nil {
		return f, nil, err
	}
	// -z --raw output: ":OLDMODE NEWMODE OLDSHA NEWSHA STATUS" NUL PATH NUL, repeated.
	fields := strings.Split(string(out), "\x00")
	for i := 0; i+1 < len(fields); i += 2 {
		meta := strings.Fields(fields[i])
		if len(meta) != 5 {
			return f, notes, fmt.Errorf("unexpected diff-tree output %q", fields[i])
		}
		switch meta[4] {
		case "A":
			f.Added++
		case "D":
			f.Removed++
		default: // M, T
			f.Changed++
		}
		if meta[1] == "160000" {
			if len(notes) == maxNamed { // the sandbox decides how many it makes
				nested++
				continue
			}
			notes = append(notes, fmt.Sprintf("nested repository %s: recorded as its commit %s, not its files", strconv.Quote(shortPath(fields[i+1])), meta[3]))
		}
	}
	if nested > 0 {
		notes = append(notes, fmt.Sprintf("… and %d more nested repositories, each recorded as its commit", nested))
	}
	return f, notes, nil
}

// oneLine shortens s to n runes and replaces control characters, for subject lines
// and listings.
func oneLine(s string, n int) string {
	var b strings.Builder
	i := 0
	for _, r := range s {
		if i == n {
			b.WriteString("…")
			break
		}
		if r < 0x20 || r == 0x7f {
			r = '?'
		}
		b.WriteRune(r)
		i++
	}
	return b.String()
}
