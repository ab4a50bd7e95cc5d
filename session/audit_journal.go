package session

import (
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
	"syscall"
	"time"

	"github.com/agentbox/agentbox/gitguard"
	"github.com/agentbox/agentbox/policy"
)

// A launcher killed with SIGKILL (or by the OOM killer) never runs its session's
// audit, and the next launch would take whatever the sandbox planted as its baseline.
// So each session leaves a journal — its baseline and scan options — in the state
// directory (outside the sandbox's reach: HOME is an overlay there) from the baseline
// until its audit is done. A launch that finds the journal of a dead launcher for its
// repository runs that audit first, against that baseline, as the dead launcher would
// have.

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
	if policy.Within(canon, repo) {
		return "", fmt.Errorf("pending-audit journal: %s lies inside the repository %s, which the sandbox can write; set XDG_STATE_HOME elsewhere", dir, repo)
	}
	return canon, nil
}

// maxJournalSize bounds what is read back: a baseline is paths and hashes.
const maxJournalSize = 256 << 20

// auditJournal is one session's pending audit.
type auditJournal struct {
	Repo     string               `json:"repo"`
	PID      int                  `json:"pid"`
	PIDStart string               `json:"pid_start"` // /proc/PID/stat starttime: PIDs are reused
	Start    time.Time            `json:"start"`
	ID       string               `json:"id"`
	Options  gitguard.ScanOptions `json:"options"`
	Base     *gitguard.Surface    `json:"base"`
}

// journalPrefix names the journals of repo: a hash of its path, so that any path fits.
func journalPrefix(repo string) string {
	sum := sha256.Sum256([]byte(repo))
	return hex.EncodeToString(sum[:8]) + "-"
}

// writeJournal records a's baseline for this launcher and returns the file.
func writeJournal(stateDir string, a *auditor) (string, error) {
	dir, err := journalDir(stateDir, a.repo)
	if err != nil {
		return "", err
	}
	pid := os.Getpid()
	j := auditJournal{Repo: a.repo, PID: pid, PIDStart: procStart(pid), Start: time.Now(), ID: a.id, Options: a.opt, Base: a.base}
	b, err := json.Marshal(&j)
	if err != nil {
		return "", fmt.Errorf("pending-audit journal: %w", err)
	}
	name := filepath.Join(dir, journalPrefix(a.repo)+strconv.Itoa(pid)+".json")
	tmp, err := os.CreateTemp(dir, ".journal-*")
	if err != nil {
		return "", fmt.Errorf("pending-audit journal: %w", err)
	}
	_, err = tmp.Write(b)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), name)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return "", fmt.Errorf("pending-audit journal: %w", err)
	}
	return name, nil
}

// auditOrphans runs the audits that dead launchers of p.Repo left pending, each
// against its own baseline, and prints what they find. A journal whose launcher is
// alive belongs to a running session and is left alone; one that cannot be audited
// now stays for the next launch.
func auditOrphans(cfg *Config, p *policy.Policy) {
	dir, err := journalDir(p.StateDir, p.Repo)
	if err != nil {
		return // startAudit says why, as it cannot write its own journal either
	}
	reclaimAbandoned(dir, p.Repo)
	names, _ := filepath.Glob(filepath.Join(dir, journalPrefix(p.Repo)+"*.json"))
	for _, name := range names {
		j, err := readJournal(name)
		if err != nil {
			fmt.Fprintf(cfg.Stderr, "agentbox: audit: pending audit %s unreadable, removed: %v\n", name, err)
			os.Remove(name)
			continue
		}
		if j.Repo != p.Repo || (j.PIDStart != "" && procStart(j.PID) == j.PIDStart) {
			continue
		}
		// Claimed by renaming, so that two launches do not both audit it.
		claimed := fmt.Sprintf("%s.claimed-%d", name, os.Getpid())
		if os.Rename(name, claimed) != nil {
			continue
		}
		cur, err := gitguard.Scan(j.Repo, j.Options)
		if err != nil {
			fmt.Fprintf(cfg.Stderr, "agentbox: audit: %s: the session of %s was killed before its audit, which fails now: %v\n", j.Repo, j.Start.Format(time.RFC3339), err)
			os.Rename(claimed, name)
			continue
		}
		findings := gitguard.Compare(j.Base, cur)
		gitguard.Quarantine(findings, j.ID)
		fmt.Fprintf(cfg.Stderr, "agentbox: audit: %s: the session of %s (launcher pid %d) was killed before its audit; audited now: %d finding(s)\n",
			j.Repo, j.Start.Format(time.RFC3339), j.PID, len(findings))
		for _, f := range findings {
			fmt.Fprintf(cfg.Stderr, "agentbox: audit: %s\n", f)
		}
		os.Remove(claimed)
	}
}

// reclaimAbandoned puts back the journals that a launch claimed and then died
// auditing (its PID is gone), so that this launch audits them.
func reclaimAbandoned(dir, repo string) {
	claimed, _ := filepath.Glob(filepath.Join(dir, journalPrefix(repo)+"*.json.claimed-*"))
	for _, c := range claimed {
		i := strings.LastIndex(c, ".claimed-")
		pid, err := strconv.Atoi(c[i+len(".claimed-"):])
		if err != nil || procStart(pid) != "" {
			continue // not ours to judge, or its claimer still runs
		}
		_ = os.Rename(c, c[:i])
	}
}

func readJournal(name string) (*auditJournal, error) {
	f, err := os.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	b, err := io.ReadAll(io.LimitReader(f, maxJournalSize))
	if err != nil {
		return nil, err
	}
	j := new(auditJournal)
	if err := json.Unmarshal(b, j); err != nil {
		return nil, err
	}
	if j.Base == nil || j.Repo == "" {
		return nil, errors.New("no baseline")
	}
	return j, nil
}

// procStart is the start time of process pid (field 22 of /proc/PID/stat), "" when
// there is no such process.
func procStart(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	// The command name (field 2) may hold spaces and parentheses: fields are
	// counted after its last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return ""
	}
	return f[19]
}
