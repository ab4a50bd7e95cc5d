package hostaudit

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/agentbox/agentbox/backend"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/gitguard/audit"
	"github.com/agentbox/agentbox/gitguard/gitconfig"
	"github.com/agentbox/agentbox/internal/termsafe"
	"github.com/agentbox/agentbox/internal/treewalk"
	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/policy"
	"github.com/agentbox/agentbox/shadow"
)

// minWatchFiles is the smallest tree (files in the shadow index) the launch
// watches: below it, placing the watch costs a launch more than the end scan's
// lstats it saves.
const minWatchFiles = 2000

// Auditor holds the repository's Git exec surface as it was at launch (P7).
type Auditor struct {
	repo        string
	id          string // names quarantined files: NAME.agentbox-quarantine-ID
	opt         audit.ScanOptions
	base        *audit.Surface
	journal     *os.File // this session's pending-audit journal, locked; removed once audited
	journalPath string
	stateDir    string         // where the journal and the quarantine live
	writable    []string       // what the sandbox can write: the quarantine must lie elsewhere
	walk        *treewalk.Walk // the baseline's walk of the working tree; nil when inherited
	// launch watches the tree from the baseline on, so that the end scan reads
	// again only what changed (audit_since_linux.go); nil when inherited or where
	// the kernel cannot watch.
	launch *audit.Launch
	// held is the directory the sandbox writes, opened at the baseline: the end
	// scan reads it wherever it was moved (gitguard/audit/audit_held_linux.go).
	held *audit.Held
	// heldGitDirs are the writable Git dirs outside it, held the same way.
	heldGitDirs []*audit.Held
	addedFor    string // an --add-dir directory's: the session's repository (adddir.go)
	addedForID  audit.DirID
}

// WidenJournal is where the audits journal the modes they widen (internal/widen):
// "" where the state dir is unusable.
func WidenJournal(stateDir string) string {
	if !filepath.IsAbs(stateDir) {
		return ""
	}
	return filepath.Join(stateDir, "widen")
}

// Holds says whether the directory the audit reads is the one with identity id
// (the one the plan binds).
func (a *Auditor) Holds(id mounts.FileID) bool {
	return a != nil && a.held != nil && a.held.Dev == id.Dev && a.held.Ino == id.Ino
}

// Start records the baseline the post-session audit compares against: the tree
// as it is, or, while another session of the repository is pending, that session's
// baseline (audit_shared.go). It runs after the placeholders are created, so they
// are part of the baseline.
//
// gitDirs are the writable Git dirs outside the repository that this session binds
// (a linked worktree's common dir, when the session accepted it): the audit covers
// exactly what the sandbox could write, no more.
func Start(cfg *Config, p *policy.Policy, gitDirs []string) (*Auditor, error) {
	opt := audit.ScanOptions{
		HostConfigs:  gitconfig.HostConfigFiles(os.Getenv),
		GitDirs:      gitDirs,
		Home:         os.Getenv("HOME"), // the operator's Git expands ~ with the real HOME
		WidenJournal: WidenJournal(p.StateDir),
	}
	held, err := audit.Hold(p.Repo)
	if err != nil {
		return nil, fmt.Errorf("audit baseline: %s: %w", p.Repo, err)
	}
	ok := false
	defer func() {
		if !ok {
			held.Close()
			closeAll(opt.HeldGitDirs)
		}
	}()
	if opt.GitDirs, opt.HeldGitDirs, err = holdGitDirs(p.Repo, gitDirs); err != nil {
		return nil, err
	}
	// Under the repository's audit lock: a session that starts after this one has
	// its journal sees it, and inherits its baseline (audit_shared.go). A launch
	// that cannot have it does not start: the holder may be an undo writing the
	// tree, or an audit whose baseline this one must inherit.
	unlock, err := takeAuditLock(p.StateDir, p.Repo, heldLockName(held.ID()))
	if err != nil {
		return nil, fmt.Errorf("%v: another agentbox (an undo, or a session's audit) holds this repository; wait for it to end and try again", err)
	}
	defer unlock()
	unlockShared, err := takeSharedLocks(p.StateDir, sharedLockKeys(p.Repo, gitDirs))
	if err != nil {
		return nil, fmt.Errorf("%v: another agentbox (a session's audit in a worktree of this repository) holds its Git directory; wait for it to end and try again", err)
	}
	defer unlockShared()
	var base *audit.Surface
	// One reading of the pending journals before the scan, one after it
	// (pendingReading): same-repository sessions cannot add one in between, as
	// they wait for the audit lock held here.
	before := readPending(p.StateDir, p.Repo)
	if j := inheritedBase(before, p.StateDir, p.Repo, held); j != nil {
		if base, err = inherit(j, &opt, held); err != nil {
			return nil, fmt.Errorf("audit baseline: %w", err)
		}
	} else {
		walkOpt := opt
		walkOpt.Walk = !cfg.NoRecord && p.StateDir != "" // for the session's record
		// The tree's files as last recorded (0: never recorded).
		n := shadow.IndexEntries(p.StateDir, p.Repo)
		if walkOpt.Walk {
			// And a directory per 64: the walk's list is allocated once, not grown
			// in blocks and joined.
			walkOpt.WalkHint = n + n/64
		}
		// A watch has a fixed cost a launch (the group, a mark per directory,
		// its reader) and saves an lstat per file at the end: below
		// minWatchFiles it costs more than it saves. With no index
		// (the first record, whose `git add` opens every file of the tree) it
		// would only read 100,000 events to end where the end scan starts without
		// it.
		walkOpt.Watch = n >= minWatchFiles
		walkOpt.Held, walkOpt.GitDirs, walkOpt.HeldGitDirs = held, opt.GitDirs, opt.HeldGitDirs
		// Read before the scan and after it (audit_sharedbase.go): a session whose
		// audit ended during the scan, or whose command started during it.
		roots := append([]string{p.Repo}, gitDirs...)
		shared := overlappingJournals(before, p.StateDir, p.Repo, roots)
		if base, err = audit.Scan(p.Repo, walkOpt); err != nil {
			return nil, fmt.Errorf("audit baseline: %w", err)
		}
		// After the scan: a session whose journal comes after this reading
		// started its command after every mark of the watch was placed
		// (overlapsOtherSession).
		after := readPending(p.StateDir, p.Repo)
		for name, j := range overlappingJournals(after, p.StateDir, p.Repo, roots) {
			if shared[name] == nil {
				shared[name] = j
			}
		}
		takeShared(base, roots, shared)
		if base.Launch != nil && (overlapsOtherSession(after, p.Repo) || mappableStdio(cfg.Stdio, base.Launch.OnDevice)) {
			base.Launch.Close() // the end scan walks the whole tree
			base.Launch = nil
		}
	}
	a := &Auditor{repo: p.Repo, id: audit.NewAuditID(), opt: opt, base: base,
		stateDir: p.StateDir, writable: append([]string{p.Repo}, gitDirs...), walk: base.Walk, launch: base.Launch, held: held,
		heldGitDirs: opt.HeldGitDirs, addedFor: cfg.addedFor, addedForID: cfg.addedForID}
	// No session runs without its journal: a launcher killed (SIGKILL, the OOM
	// killer) would leave its session unaudited, and the next launch would take
	// what it planted for the user's own. The journal is written once, here, and
	// only removed after: nothing rewrites it while the session runs.
	if a.journal, a.journalPath, err = writeJournal(p.StateDir, a); err != nil {
		a.launch.Close()
		return nil, JournalError(err, p.StateDir)
	}
	a.opt.HeldGitDirs = nil // Finish passes them
	base.Walk, base.Launch = nil, nil
	ok = true
	return a, nil
}

// JournalError is the refusal of a launch whose crash journal (the repository's
// pending audit, or the kept paths' ledger) cannot be written in stateDir: what
// failed, why no session runs without it, and what to do.
func JournalError(err error, stateDir string) error {
	where := "set XDG_STATE_HOME (or HOME) to an absolute directory of yours"
	if stateDir != "" {
		where = "free space in " + termsafe.Quote(stateDir) + " (or make it writable), or set XDG_STATE_HOME to another directory of yours"
	}
	return fmt.Errorf("%v; agentbox starts no session whose audit a killed launcher would leave undone: %s, and try again", err, where)
}

// finish runs the audit on the host after the session, whatever its outcome: it
// moves aside every new or changed thing that would make the operator's Git run a
// program, prints one line per finding and stores the lines in out.
func (a *Auditor) Finish(cfg *Config, out *Outcome) {
	defer a.lockAudit(cfg.Stderr)()
	defer lockShared(cfg.Stderr, a.stateDir, sharedLockKeys(a.repo, a.opt.GitDirs))()
	opt := a.opt
	opt.Walk = !cfg.NoRecord && a.stateDir != "" // one walk for the audit and the record
	if a.walk != nil {
		opt.WalkHint = len(a.walk.Entries) // the tree as it was at launch
	}
	// The sandbox's processes are gone (the backend waited for its init, whose
	// death ends every process of its PID namespace): what the watch saw is all
	// they did.
	a.launch.Stop()
	if l, prev := a.launch, out.Released; l != nil {
		out.Released = func() {
			if prev != nil {
				prev()
			}
			l.Released()
		}
	}
	opt.Since = a.launch
	opt.Held, opt.HeldGitDirs = a.held, a.heldGitDirs
	t0 := time.Now()
	cur, err := audit.Scan(a.repo, opt)
	if err == nil {
		// AGENTBOX_TIMINGS, and the record: whether the end scan took listings
		// from the launch (audit_since_linux.go) or read the whole tree.
		name := "host: end scan, whole tree"
		if cur.Taken() > 0 {
			name = "host: end scan, from the watch"
		}
		out.Phases = append(out.Phases, backend.Phase{Name: name, Dur: time.Since(t0)})
	}
	a.launch = nil
	if err != nil {
		out.found(cfg.Stderr, fmt.Sprintf("%s: not audited: %v", termsafe.Quote(a.repo), err))
		out.Unresolved++
		return
	}
	if line := movedLine(a.repo, cur); line != "" {
		if cur.Walk != nil {
			cur.Walk.Complete = false // of the moved directory, not of what is at the path now
		}
		out.found(cfg.Stderr, line)
	}
	for _, line := range movedGitDirLines(cur) {
		out.found(cfg.Stderr, line)
	}
	findings := audit.Compare(a.base, cur)
	out.Walk = cur.Walk
	if len(findings) > 0 && cur.Walk != nil {
		// What the quarantine moves after it, the walk does not stand for: the
		// recorder sweeps, yet still prices and names what it lists (shadow/price.go).
		cur.Walk.Complete = false
	}
	quarantine(findings, a.id, QuarantineRoot(cfg.Stderr, a.stateDir, append(a.writable, nowPaths(cur)...)))
	for _, f := range findings {
		out.found(cfg.Stderr, f.String())
		if f.Unresolved() {
			out.Unresolved++
		}
	}
	a.Drop()
}

// drop removes the journal: the audit is done, or there is nothing to audit. It is
// removed before its lock goes, so that no launch takes it for a dead launcher's.
func (a *Auditor) Drop() {
	a.launch.Close()
	a.launch = nil
	a.held.Close()
	closeAll(a.heldGitDirs)
	a.heldGitDirs = nil
	if a.journal != nil {
		os.Remove(a.journalPath)
		a.journal.Close()
	}
}

// movedLine says, in one line, that the directory the session wrote is no longer
// at its path, and where it was audited; "" when it was not moved.
func movedLine(repo string, cur *audit.Surface) string {
	switch {
	case cur.Removed:
		return fmt.Sprintf("%s was removed during the session; nothing of it left to audit", termsafe.Quote(repo))
	case cur.Now != "" && cur.Now != repo:
		return fmt.Sprintf("%s was moved during the session to %s; audited there (something else may be at its path now)", termsafe.Quote(repo), termsafe.Quote(cur.Now))
	}
	return ""
}

// mappableStdio reports whether the sandbox inherits, as its standard input or output
// (stdio), a regular file opened for reading and writing on a filesystem whose
// directories the launch watched (watched: audit.Launch.OnDevice) (agentbox exec …
// 1<>repo/f): opened before the watch's marks, it can be mapped and written
// through with no event. Only O_RDWR matters: a shared writable mapping needs a
// readable descriptor, and a write(2) through any descriptor is reported. Not the
// repository's device alone: a tmpfs or a btrfs subvolume mounted in the tree has
// its own, and its directories are marked as the rest.
func mappableStdio(stdio backend.Stdio, watched func(dev uint64) bool) bool {
	for _, f := range []*os.File{stdio.Stdin, stdio.Stdout, stdio.Stderr} {
		if f == nil {
			continue
		}
		fd := int(f.Fd())
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil {
			return true
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG || !watched(st.Dev) {
			continue
		}
		if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); err != nil || fl&unix.O_ACCMODE == unix.O_RDWR {
			return true
		}
	}
	return false
}
