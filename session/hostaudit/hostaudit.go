// Package hostaudit is the post-session audit of the repository (and of each
// --add-dir directory) on the host, as a session runs it: the baseline taken at
// launch, the end scan, the quarantine of what the session planted that would make
// the operator's Git run a program (P7), and the crash journal that lets the next
// launch, or `agentbox audit`, run the audit a killed launcher left pending. The
// scanning itself is gitguard/audit's; this package decides when, against what,
// under which lock, and what survives a crash. The kept paths' audit (kept.go) runs
// beside it, through agentcfg's ledger.
package hostaudit

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/backend"
	"github.com/agentbox/agentbox/gitguard/audit"
	"github.com/agentbox/agentbox/internal/termsafe"
	"github.com/agentbox/agentbox/internal/treewalk"
)

// Config is what the audits need of the session.
type Config struct {
	Stderr   io.Writer     // agentbox's own lines: one per finding, warnings
	NoRecord bool          // no shadow record: the scans need not walk the tree for it
	Stdio    backend.Stdio // the command's streams (mappableStdio)
	addedFor string        // set by StartDirs for an added directory's audit
	// addedForID is addedFor's identity, for a launch there by another path.
	addedForID audit.DirID
}

// Outcome is what the audits found, for the session's outcome and record.
type Outcome struct {
	AuditFindings []string // one line per finding, as printed
	// Unresolved counts the findings left where the user's Git may read or run
	// them (audit.Finding.Unresolved), and audits that could not run: the
	// session then fails.
	Unresolved int
	Phases     []backend.Phase // the end scan's timing
	// Walk is the end scan's walk of the working tree, which the record reuses;
	// nil when there is none or it cannot stand for the tree (the audit moved
	// findings away after it).
	Walk *treewalk.Walk
	// Released waits until the end scans' watches have let go of their kernel
	// groups (audit.Launch.Released); nil when there were none. The session calls
	// it after its record's end, which the groups' release runs beside.
	Released func()
}

// found records one line of the audit's findings and prints it. The line names what
// the session chose (file names, config entries, errors quoting paths) and goes on
// as it is to the Go API's Result.AuditFindings, and to stderr through a writer that
// keeps newlines: it is made one line with no rune a terminal acts on here
// (termsafe.String leaves a line already safe as it is).
//
// A session chooses how many there are: 3,000 planted hooks printed 850 KB on the
// operator's terminal. Past MaxShownFindings lines an Outcome prints no more;
// Close lists every line in a file beside the quarantine and says so in one line.
func (o *Outcome) found(w io.Writer, line string) {
	line = termsafe.String(line)
	o.AuditFindings = append(o.AuditFindings, line)
	if len(o.AuditFindings) <= MaxShownFindings {
		fmt.Fprintf(w, "agentbox: audit: %s\n", line)
	}
}

// MaxShownFindings bounds the finding lines one audit prints; MaxKeptFindings
// those it keeps in Outcome.AuditFindings (the session's record, the Go API's
// Result.AuditFindings). Every line is in the list Close writes.
const (
	MaxShownFindings = 20
	MaxKeptFindings  = 500
)

// FindingsList is the file that lists every finding line of the audit or
// session named id, in stateDir's quarantine, where the sandbox cannot write.
func FindingsList(stateDir, id string) string {
	return filepath.Join(stateDir, "quarantine", id+".findings")
}

// Close ends o's lines. When it found more than it printed, every line is written
// to FindingsList(stateDir, id) and one line says how many were not shown and where
// they are; past MaxKeptFindings, AuditFindings keeps the first lines and that line
// last. Without a list to write (no quarantine directory, the disk full), the rest
// are printed after all: a finding is never hidden from the operator.
func (o *Outcome) Close(w io.Writer, stateDir, id string) {
	n := len(o.AuditFindings)
	if n <= MaxShownFindings {
		return
	}
	if id == "" {
		id = audit.NewAuditID()
	}
	list := FindingsList(stateDir, id)
	if err := writeList(stateDir, list, o.AuditFindings); err != nil {
		fmt.Fprintf(w, "agentbox: audit: %d more finding(s) (their list could not be written: %s):\n", n-MaxShownFindings, termsafe.String(err.Error()))
		for _, line := range o.AuditFindings[MaxShownFindings:] {
			fmt.Fprintf(w, "agentbox: audit: %s\n", line)
		}
		return
	}
	more := fmt.Sprintf("and %d more finding(s), not shown: all %d are listed in %s", n-MaxShownFindings, n, termsafe.Quote(list))
	fmt.Fprintf(w, "agentbox: audit: %s\n", more)
	if n > MaxKeptFindings {
		o.AuditFindings = append(o.AuditFindings[:MaxKeptFindings:MaxKeptFindings],
			fmt.Sprintf("and %d more finding(s): all %d are listed in %s", n-MaxKeptFindings, n, termsafe.Quote(list)))
	}
}

// writeList writes lines to path, a new file (never through a link) in the
// quarantine directory of stateDir.
func writeList(stateDir, path string, lines []string) error {
	if !filepath.IsAbs(stateDir) {
		return fmt.Errorf("no state directory")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(f)
	for _, line := range lines {
		bw.WriteString(line)
		bw.WriteByte('\n')
	}
	err = bw.Flush()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
	}
	return err
}

// BaseWalk is the baseline's walk of the working tree (nil when the baseline was
// inherited or not walked), from which the record's start state is taken.
func (a *Auditor) BaseWalk() *treewalk.Walk { return a.walk }

// CheckpointWalk walks the working tree in the middle of the session, for a
// checkpoint's record: from the launch's listings where the watch saw nothing
// change (audit.Launch.Peek), else the whole tree; nil when the walk cannot stand
// for the tree (the recorder then sweeps). It audits nothing and moves nothing:
// the end scan does, against the baseline.
func (a *Auditor) CheckpointWalk() *treewalk.Walk {
	if a == nil {
		return nil
	}
	opt := audit.ScanOptions{Walk: true, Since: a.launch.Peek()}
	if a.walk != nil {
		opt.WalkHint = len(a.walk.Entries)
	}
	cur, err := audit.Scan(a.repo, opt)
	if err != nil || cur.Walk == nil || !cur.Walk.Complete {
		return nil
	}
	return cur.Walk
}
