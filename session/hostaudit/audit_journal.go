package hostaudit

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/gitguard/audit"
	"github.com/agentbox/agentbox/internal/hostpath"
	"github.com/agentbox/agentbox/internal/termsafe"
	"github.com/agentbox/agentbox/internal/widen"
	"github.com/agentbox/agentbox/policy"
	"github.com/agentbox/agentbox/session/leftovers"
)

// A launcher killed with SIGKILL (or by the OOM killer) never runs its session's
// audit, and the next launch would take whatever the sandbox planted as its baseline.
// So each session leaves a journal — its baseline and scan options — in the state
// directory (outside the sandbox's reach: HOME is an overlay there), locked from the
// baseline until its audit is done. A launch that can lock the journal of its
// repository knows its launcher died, and runs that audit first, against that
// baseline, as the dead launcher would have.

// journalDir is the directory of the pending audits, created when missing. It must lie
// where the sandbox cannot write — as the shadow store's, refused inside the
// repository — or a session could plant a journal whose baseline already holds what
// it planted.
func journalDir(stateDir, repo string) (string, error) {
	if !filepath.IsAbs(stateDir) {
		return "", fmt.Errorf("pending-audit journal: state directory %q: not absolute", stateDir)
	}
	dir := filepath.Join(stateDir, "audit-pending")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("pending-audit journal: %w", err)
	}
	canon, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", fmt.Errorf("pending-audit journal: %w", err)
	}
	if hostpath.Within(canon, repo) {
		return "", fmt.Errorf("pending-audit journal: %s lies inside the repository %s, which the sandbox can write; set XDG_STATE_HOME elsewhere", dir, repo)
	}
	return canon, nil
}

// journalSuffix ends a journal's name (journal_codec.go has its format).
const journalSuffix = ".journal"

// maxJournalSize bounds what is read back: a baseline is paths and hashes.
const maxJournalSize = 256 << 20

// auditJournal is one session's pending audit.
type auditJournal struct {
	Repo string `json:"repo"`
	// For is, for an --add-dir directory's audit, the session's repository: a
	// launch there runs it too (adddir.go).
	For     string            `json:"for,omitempty"`
	PID     int               `json:"pid"`
	Start   time.Time         `json:"start"`
	ID      string            `json:"id"`
	Options audit.ScanOptions `json:"options"`
	Base    *audit.Surface    `json:"base"`
	// IDs are the identities of the directories the session wrote (the
	// repository and each of Options.GitDirs) by path: the audit a later launch
	// runs reads them only if what lies at the path now is the same directory.
	// For's is here too: a launch in that repository by another path runs this
	// audit as well (forReached).
	IDs map[string]audit.DirID `json:"ids,omitempty"`
}

// journalSeq numbers the journals this process writes (writeJournal).
var journalSeq atomic.Uint64

// journalPrefix names the journals of repo: a hash of its path, so that any path fits.
func journalPrefix(repo string) string {
	sum := sha256.Sum256([]byte(repo))
	return hex.EncodeToString(sum[:8]) + "-"
}

// writeJournal records a's baseline and returns the journal, open and flock'ed: the
// lock lasts while this launcher lives (as a leftovers.Claim), so a launch that can take it
// knows the launcher is gone.
func writeJournal(stateDir string, a *Auditor) (*os.File, string, error) {
	dir, err := journalDir(stateDir, a.repo)
	if err != nil {
		return nil, "", err
	}
	pid := os.Getpid()
	j := &auditJournal{Repo: a.repo, For: a.addedFor, PID: pid, Start: time.Now(), ID: a.id, Options: a.opt, Base: a.base, IDs: map[string]audit.DirID{}}
	for _, h := range append([]*audit.Held{a.held}, a.heldGitDirs...) {
		if h != nil {
			j.IDs[h.Path] = h.ID()
		}
	}
	if a.addedFor != "" && a.addedForID != (audit.DirID{}) {
		if _, ok := j.IDs[a.addedFor]; !ok {
			j.IDs[a.addedFor] = a.addedForID
		}
	}
	b := encodeJournal(j)
	// Locked before it has its name, so that no launch ever sees it unlocked.
	tmp, err := os.CreateTemp(dir, ".journal-*")
	if err != nil {
		return nil, "", journalWriteError(dir, err)
	}
	// The launcher's PID, and the session's number in it: a Go API program runs
	// sessions of one repository at once, and under one name the second's journal
	// replaced the first's, whose session then ran on with none once the second
	// removed it.
	name := filepath.Join(dir, journalPrefix(a.repo)+strconv.Itoa(pid)+"-"+strconv.FormatUint(journalSeq.Add(1), 10)+journalSuffix)
	_, err = tmp.Write(b)
	if err == nil {
		err = unix.Flock(int(tmp.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), name)
	}
	if err != nil {
		os.Remove(tmp.Name())
		tmp.Close()
		return nil, "", journalWriteError(dir, err)
	}
	return tmp, name, nil
}

// journalWriteError names the directory a journal could not be written in and
// why, not the temporary file's name the system call quoted.
func journalWriteError(dir string, err error) error {
	var pe *os.PathError
	var le *os.LinkError
	switch {
	case errors.As(err, &pe):
		err = pe.Err
	case errors.As(err, &le):
		err = le.Err
	}
	return fmt.Errorf("pending-audit journal: cannot write it in %s: %w", termsafe.Quote(dir), err)
}

// Orphans runs the audits that dead launchers of p.Repo, or of a repository whose
// writable roots overlap it, left pending, each against its own baseline, and
// prints what they find. A journal whose lock is held
// belongs to a running session (or to another launch auditing it) and is left alone;
// one that cannot be audited now stays for the next launch.
func Orphans(cfg *Config, p *policy.Policy) {
	// The modes a killed launcher's audit widened and did not put back.
	if j := WidenJournal(p.StateDir); j != "" {
		widen.Recover(j)
	}
	dir, err := journalDir(p.StateDir, p.Repo)
	if err != nil {
		return // Start says why, as it cannot write its own journal either
	}
	// One read of the directory, on every launch; journals of agentbox before 2026-11
	// were JSON.
	ents, _ := os.ReadDir(dir)
	prefix := journalPrefix(p.Repo)
	var unlock func()
	var others []*os.File // other repositories' dead launchers' journals, locked
	for _, e := range ents {
		n := e.Name()
		if !(strings.HasSuffix(n, journalSuffix) || strings.HasSuffix(n, ".json")) {
			continue
		}
		name := filepath.Join(dir, n)
		f, _ := leftovers.TakeLock(name)
		if f == nil {
			continue
		}
		if !strings.HasPrefix(n, prefix) {
			others = append(others, f)
			continue
		}
		if unlock == nil {
			unlock = lockRepoAudit(cfg.Stderr, p.StateDir, p.Repo)
		}
		auditOrphan(cfg, p, name, f, p.Repo)
		f.Close()
	}
	if unlock != nil {
		unlock() // before another repository's lock is taken: one lock at a time
	}
	var selves []reached
	if len(others) > 0 {
		selves = reachedDirs(append([]string{p.Repo}, p.AddDirs...))
	}
	for _, f := range others {
		sharedOrphan(cfg, p, selves, f.Name(), f)
		f.Close()
	}
}

// reached is a directory this launch works in or adds, and its identity.
type reached struct {
	path string
	id   audit.DirID
}

// reachedDirs holds each of paths (no symlink on the way) for its identity; one
// that cannot be held is left out.
func reachedDirs(paths []string) []reached {
	var out []reached
	for _, p := range paths {
		if h, err := audit.Hold(p); err == nil {
			out = append(out, reached{p, h.ID()})
			h.Close()
		}
	}
	return out
}

// sharedOrphan runs the pending audit of a dead launcher of another repository
// when what it could write overlaps p.Repo (audit_sharedbase.go): a linked
// worktree's session writes this repository's .git, and its worktree may never be
// launched in again (or be removed), so its missed audit is this launch's to run.
// So is one of a directory that a session of p.Repo added (--add-dir), which the
// next launch may no longer add. And so is one of a directory this launch works
// in or adds (selves) reached by another path (a bind mount, a case-folding
// directory, moved since): the journal's identity of its directory is that
// directory's.
func sharedOrphan(cfg *Config, p *policy.Policy, selves []reached, name string, f *os.File) {
	j, err := readJournalHeader(f)
	if err != nil {
		return // an unreadable one is its own repository's launch to report
	}
	at := reachedAt(cfg, j, selves)
	if at == j.Repo && !forReached(j, p.Repo, selves) && len(sharedRoots([]string{p.Repo}, journalRoots(j))) == 0 {
		return
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return
	}
	// Reached by another path, it is that path's launches whose baselines must wait
	// for this audit: those at the journal's path inherit its baseline.
	defer lockRepoAudit(cfg.Stderr, p.StateDir, at)()
	auditOrphan(cfg, &policy.Policy{Repo: j.Repo, StateDir: p.StateDir}, name, f, at)
}

// forReached says whether j is an added directory's audit whose session's
// repository (For) is repo, by path or, reached by another path, by its identity:
// the device, inode and birth time the journal holds for it (a killed launcher's
// journal: no descriptor kept the inode number from passing to a new directory).
func forReached(j *auditJournal, repo string, selves []reached) bool {
	if j.For == "" || j.For == repo {
		return j.For != ""
	}
	id, ok := j.IDs[filepath.Clean(j.For)]
	if !ok || id.Birth == 0 {
		return false
	}
	for _, r := range selves {
		if r.path == repo {
			return r.id == id
		}
	}
	return false
}

// reachedAt is the path among selves of the directory j's repository is, by its
// identity, or j.Repo when none is. Found at a path the journal does not name, it
// must have the journal's birth time too: a removed directory's inode number goes to
// the next directory made, and a new repository audited against the removed one's
// baseline would have its own hooks and configs moved aside as plants. Where the
// filesystem keeps no birth time, a line says why the audit is not run there.
func reachedAt(cfg *Config, j *auditJournal, selves []reached) string {
	id, ok := j.IDs[filepath.Clean(j.Repo)]
	if !ok {
		return j.Repo
	}
	for _, r := range selves {
		if r.path == filepath.Clean(j.Repo) {
			return j.Repo // the journal's own path: holdJournaled checks the identity there
		}
		if r.id.Dev != id.Dev || r.id.Ino != id.Ino {
			continue
		}
		if r.id.Birth != 0 && r.id.Birth == id.Birth {
			return r.path
		}
		if r.id.Birth == 0 || id.Birth == 0 {
			fmt.Fprintf(cfg.Stderr, "agentbox: audit: %s has the device and inode of %s, whose session of %s (launcher pid %d) was killed before its audit, but no birth time to tell the same directory from one made since with a removed directory's inode number: that audit is not run here; if you moved the directory from there, move it back and run agentbox audit there\n",
				termsafe.Quote(r.path), termsafe.Quote(j.Repo), j.Start.Format(time.RFC3339), j.PID)
		}
	}
	return j.Repo
}

// auditOrphan runs one pending audit whose journal, name, this launch holds locked;
// its repository is the directory at path at, which may not be the path the
// journal names (sharedOrphan).
func auditOrphan(cfg *Config, p *policy.Policy, name string, f *os.File, at string) {
	j, err := readJournal(f)
	if err != nil {
		fmt.Fprintf(cfg.Stderr, "agentbox: audit: pending audit %s unreadable, removed: %s\n", termsafe.Quote(name), termsafe.String(err.Error()))
		os.Remove(name)
		return
	}
	if j.Repo != p.Repo {
		return
	}
	defer lockShared(cfg.Stderr, p.StateDir, sharedLockKeys(j.Repo, j.Options.GitDirs))()
	j.Options.WidenJournal = WidenJournal(p.StateDir)
	held, ok := holdJournaled(cfg, j, at) // orphan_held.go
	defer closeAll(held)
	if !ok {
		os.Remove(name)
		return
	}
	cur, err := audit.Scan(j.Repo, j.Options)
	if err != nil {
		fmt.Fprintf(cfg.Stderr, "agentbox: audit: %s: the session of %s was killed before its audit, which fails now: %s\n", termsafe.Quote(j.Repo), j.Start.Format(time.RFC3339), termsafe.String(err.Error()))
		return
	}
	findings := audit.Compare(j.Base, cur)
	quarantine(findings, j.ID, QuarantineRoot(cfg.Stderr, p.StateDir, append([]string{j.Repo, at}, j.Options.GitDirs...)))
	where := ""
	if cur.Now != "" && cur.Now != j.Repo {
		where = " (the same directory, reached now at " + termsafe.Quote(cur.Now) + ")"
	}
	fmt.Fprintf(cfg.Stderr, "agentbox: audit: %s%s: the session of %s (launcher pid %d) was killed before its audit; audited now: %d finding(s)\n",
		termsafe.Quote(j.Repo), where, j.Start.Format(time.RFC3339), j.PID, len(findings))
	var o Outcome
	for _, f := range findings {
		o.found(cfg.Stderr, f.String())
	}
	o.Close(cfg.Stderr, p.StateDir, j.ID)
	os.Remove(name)
}

func readJournal(f *os.File) (*auditJournal, error) {
	b, err := io.ReadAll(io.LimitReader(f, maxJournalSize))
	if err != nil {
		return nil, err
	}
	var j *auditJournal
	if bytes.HasPrefix(b, []byte("{")) {
		j = new(auditJournal)
		err = json.Unmarshal(b, j)
	} else {
		j, err = decodeJournal(b)
	}
	if err != nil {
		return nil, err
	}
	if j.Base == nil || j.Repo == "" {
		return nil, errors.New("no baseline")
	}
	return j, nil
}

// maxJournalHeader bounds what is read of a journal's header: a few paths.
const maxJournalHeader = 1 << 20

// readJournalHeader reads f's journal up to its baseline (Base nil): repository,
// launcher, start and scan options. A journal of agentbox before 2026-11 (JSON) is
// read whole.
func readJournalHeader(f *os.File) (*auditJournal, error) {
	r := bufio.NewReader(io.LimitReader(f, maxJournalHeader))
	if b, err := r.Peek(1); err == nil && b[0] == '{' {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return nil, err
		}
		return readJournal(f)
	}
	j, err := decodeJournalFrom(r, true)
	if err != nil {
		return nil, err
	}
	if j.Repo == "" {
		return nil, errors.New("no repository")
	}
	return j, nil
}

// Pending runs the audits that dead launchers of repo left pending in stateDir
// (policy.Policy.StateDir), as the next launch in repo would, and prints what they
// find on stderr: `agentbox audit` does it first, so that the missed audit of a
// killed launcher is not left waiting for a launch that may never come.
func Pending(stateDir, repo string, stderr io.Writer) {
	Orphans(&Config{Stderr: stderr}, &policy.Policy{Repo: repo, StateDir: stateDir})
}
