package hostaudit

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/gitguard/audit"
	"github.com/agentbox/agentbox/internal/flock"
	"github.com/agentbox/agentbox/internal/hostpath"
	"github.com/agentbox/agentbox/internal/safepath"
)

// Two sessions on one repository (docs/promises.md P13). A session's baseline is what its
// audit takes for the user's own; were it the tree as it is at launch, a second
// session would take whatever the first one, still running, planted for the user's,
// and — once the first session's audit moved the plant aside — could put it back
// unseen. So:
//
//   - a session that starts while another session of the repository is pending
//     (running, or killed before its audit) inherits the oldest pending session's
//     baseline instead of scanning the tree: the last state no sandbox had touched;
//   - baselines and audits of one repository take turns under a lock of their own
//     (STATE/audit-locks/, named by the directory's identity: auditLockName), so
//     that no baseline is taken while a plant is being moved and no two audits move
//     the same file, whatever path each session reached the repository by;
//   - quarantined files leave the repository, for STATE/quarantine/ID/PATH, where no
//     sandbox reaches, so a running session cannot undo a quarantine; and the audit
//     of each session, the last one's included, compares with the inherited
//     baseline, so a plant hidden from one audit is found by the next.

// auditLockWait bounds the wait for the repository's audit lock: its holder does one
// bounded scan (or an undo). Past it, a launch is refused; an audit goes on
// without the lock and says so, as it must run whatever happens.
var auditLockWait = 2 * time.Minute

// lockRepoAudit takes the audit lock of repo for an audit; unlock releases it. It
// never fails: a lock that cannot be had is reported on w and the caller goes on
// without it.
func lockRepoAudit(w io.Writer, stateDir, repo string) (unlock func()) {
	unlock, err := takeRepoAuditLock(stateDir, repo)
	if err != nil {
		fmt.Fprintf(w, "agentbox: warning: %v; going on without it\n", err)
		return func() {}
	}
	return unlock
}

// lockAudit is lockRepoAudit for a's audit: the lock of the directory a holds,
// wherever it lies now.
func (a *Auditor) lockAudit(w io.Writer) (unlock func()) {
	name := auditLockName(a.repo)
	if a.held != nil {
		name = heldLockName(a.held.ID())
	}
	unlock, err := takeAuditLock(a.stateDir, a.repo, name)
	if err != nil {
		fmt.Fprintf(w, "agentbox: warning: %v; going on without it\n", err)
		return func() {}
	}
	return unlock
}

// takeRepoAuditLock takes the audit lock of the directory at repo
// (auditLockName), waiting at most auditLockWait.
func takeRepoAuditLock(stateDir, repo string) (unlock func(), err error) {
	return takeAuditLock(stateDir, repo, auditLockName(repo))
}

// takeAuditLock takes the audit lock name for repo, waiting at most
// auditLockWait.
func takeAuditLock(stateDir, repo, name string) (unlock func(), err error) {
	if _, err := journalDir(stateDir, repo); err != nil {
		return func() {}, nil // Start says why, as it cannot write its journal either
	}
	dir := filepath.Join(stateDir, "audit-locks")
	path := filepath.Join(dir, name)
	err = os.MkdirAll(dir, 0o700)
	var f *os.File
	if err == nil {
		f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o600)
	}
	if err == nil {
		err = flock.Wait(f, auditLockWait)
		if err != nil {
			f.Close()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("audit lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}

// auditLockName names the audit lock of the directory at dir by its identity, its
// device and inode, so that every path to one directory (a bind mount, a symlink,
// its new name after a move) takes one lock; by a hash of the path when no
// directory is there. Unlike a pending journal's match at another path
// (reachedAt), no birth time is needed: two directories share a lock only when one
// was removed while its lock was held, and then they take turns needlessly, never
// miss each other.
func auditLockName(dir string) string {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return heldLockName(audit.DirID{Dev: st.Dev, Ino: st.Ino})
	}
	return journalPrefix(dir) + "lock"
}

// heldLockName is auditLockName of the directory with identity id.
func heldLockName(id audit.DirID) string {
	return fmt.Sprintf("dir-%d-%d-lock", id.Dev, id.Ino)
}

// inheritedBase returns the baseline of the oldest pending session of repo, nil when
// there is none. Unreadable journals are skipped: Orphans reports them. A session of
// the directory held (nil: by path only) reached by another path counts too
// (sameDirElsewhere); its baseline comes with its paths moved to repo's (rebased).
func inheritedBase(r pendingReading, stateDir, repo string, held *audit.Held) *auditJournal {
	type pending struct {
		name  string
		start time.Time
	}
	var same []pending
	prefix := journalPrefix(repo)
	ours := func(name string, j *auditJournal) bool {
		return (strings.HasPrefix(name, prefix) && j.Repo == repo) || sameDirElsewhere(stateDir, repo, name, j, held)
	}
	r.each(func(name string, j *auditJournal) {
		if j != nil && ours(name, j) {
			same = append(same, pending{name, j.Start})
		}
	})
	sort.Slice(same, func(i, k int) bool { return same[i].start.Before(same[k].start) })
	for _, p := range same {
		if j := loadJournal(stateDir, repo, p.name); j != nil && ours(p.name, j) {
			return rebased(j, repo)
		}
	}
	return nil
}

// sameDirElsewhere says whether the pending journal name, j, is of the directory
// held under another path than repo: a bind mount of it, or its old name. The
// device and inode must be the journal's, and either the birth time too (a
// removed directory's inode number goes to the next one made) or the journal be
// locked: its launcher lives and holds the directory open, so its inode number
// is still that directory's.
func sameDirElsewhere(stateDir, repo, name string, j *auditJournal, held *audit.Held) bool {
	if held == nil || j.Repo == repo {
		return false
	}
	id, ok := j.IDs[filepath.Clean(j.Repo)]
	if !ok || id.Dev != held.Dev || id.Ino != held.Ino {
		return false
	}
	if id.Birth != 0 && id.Birth == held.Birth {
		return true
	}
	dir, err := journalDir(stateDir, repo)
	return err == nil && journalLocked(filepath.Join(dir, name))
}

// journalLocked says whether a live launcher (or a launch auditing it) holds the
// journal at path locked.
func journalLocked(path string) bool {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	return unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB) != nil
}

// rebased returns j with its repository's paths, in its baseline, moved from
// j.Repo to repo: the same directory, whose scans at repo name its paths so.
func rebased(j *auditJournal, repo string) *auditJournal {
	if j.Repo == repo {
		return j
	}
	move := func(p string) string {
		if rel, ok := strings.CutPrefix(p, j.Repo); ok && hostpath.Within(p, j.Repo) {
			return repo + rel
		}
		return p
	}
	base := &audit.Surface{Repo: repo, Items: make(map[string]*audit.Item, len(j.Base.Items))}
	for p, it := range j.Base.Items {
		moved := *it
		moved.Path = move(it.Path)
		base.Items[move(p)] = &moved
	}
	for _, sk := range j.Base.Skipped {
		sk.Path = move(sk.Path)
		base.Skipped = append(base.Skipped, sk)
	}
	out := *j
	out.Repo, out.Base = repo, base
	return &out
}

// loadJournal reads the pending journal name whole, baseline included; nil when it
// is gone or cannot be read.
func loadJournal(stateDir, repo, name string) *auditJournal {
	dir, err := journalDir(stateDir, repo)
	if err != nil {
		return nil
	}
	f, err := safepath.OpenRegular(filepath.Join(dir, name))
	if err != nil {
		return nil
	}
	defer f.Close()
	j, err := readJournal(f)
	if err != nil {
		return nil
	}
	return j
}

// pendingReading is one reading of the pending-audit journals (pendingJournals):
// a launch's baseline reads them once before its scan and once after it
// (audit_sharedbase.go), and each answer it needs at that moment — the baseline
// it inherits and the overlapping sessions' before the scan, the overlapping
// sessions' and whether another session's tree overlaps after it — comes from
// that moment's reading, not from a reading of its own a moment later.
type pendingReading struct {
	ok   bool // the journals' directory could be had (journalDir)
	list []pendingHeader
}

// pendingHeader is one journal of a reading: its name and header (nil: unreadable).
type pendingHeader struct {
	name string
	j    *auditJournal
}

// readPending reads the pending journals of stateDir once.
func readPending(stateDir, repo string) pendingReading {
	_, err := journalDir(stateDir, repo)
	r := pendingReading{ok: err == nil}
	pendingJournals(stateDir, repo, func(name string, j *auditJournal) {
		r.list = append(r.list, pendingHeader{name, j})
	})
	return r
}

// each calls fn with each journal of the reading, as pendingJournals does.
func (r pendingReading) each(fn func(name string, j *auditJournal)) {
	for _, h := range r.list {
		fn(h.name, h.j)
	}
}

// pendingJournals calls fn with each pending-audit journal's name and header, its
// baseline left out (nil when it cannot be read): every launch looks at every
// session's journal, and one session's baseline, however large its repository's
// exec surface, must not cost the launches of other repositories (loadJournal
// reads one whole).
func pendingJournals(stateDir, repo string, fn func(name string, j *auditJournal)) {
	dir, err := journalDir(stateDir, repo)
	if err != nil {
		return
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		n := e.Name()
		if !e.Type().IsRegular() || !(strings.HasSuffix(n, journalSuffix) || strings.HasSuffix(n, ".json")) {
			continue
		}
		f, err := safepath.OpenRegular(filepath.Join(dir, n))
		if err != nil {
			fn(n, nil)
			continue
		}
		j, err := readJournalHeader(f)
		f.Close()
		if err != nil {
			j = nil
		}
		fn(n, j)
	}
}

// QuarantineRoot is where this session's audit moves what it finds: STATE/quarantine,
// created when missing; "" (move aside in place) when it cannot be used — it must lie
// outside everything the sandbox could write.
func QuarantineRoot(w io.Writer, stateDir string, writable []string) string {
	if !filepath.IsAbs(stateDir) {
		return ""
	}
	dir := filepath.Join(stateDir, "quarantine")
	err := os.MkdirAll(dir, 0o700)
	var canon string
	if err == nil {
		canon, err = filepath.EvalSymlinks(dir)
	}
	for _, p := range writable {
		if err == nil && p != "" && hostpath.Within(canon, p) {
			err = fmt.Errorf("lies inside %s, which the sandbox can write", p)
		}
	}
	if err != nil {
		fmt.Fprintf(w, "agentbox: warning: quarantine directory %s: %v; findings are moved aside in place\n", dir, err)
		return ""
	}
	return canon
}

// quarantine moves findings out of the repository into root, or in place when root
// is "".
func quarantine(findings []audit.Finding, id, root string) {
	if root == "" {
		audit.Quarantine(findings, id)
		return
	}
	audit.QuarantineTo(findings, id, root)
}

// overlapsOtherSession reports whether a pending session of another repository
// (or added directory) lies inside repo or holds it: its sandbox may have opened
// and mapped a file of this tree before this launch's watch marked its directory,
// and write through the mapping unseen. Called after the
// launch scan, so that a session whose journal comes later started its command
// after every mark was placed.
func overlapsOtherSession(r pendingReading, repo string) bool {
	if !r.ok {
		return true
	}
	overlap := false
	own := journalPrefix(repo)
	r.each(func(name string, j *auditJournal) {
		switch {
		case strings.HasPrefix(name, own):
		case j == nil: // unreadable: it could be anything's
			overlap = true
		default:
			overlap = overlap || hostpath.Within(j.Repo, repo) || hostpath.Within(repo, j.Repo)
		}
	})
	return overlap
}
