// Package audit is the post-session audit (docs/promises.md P7). Read-only .git/config and
// .git/hooks do not close Git's exec surface: the rest of .git and the working tree
// stay writable, so a
// sandbox can point Git elsewhere (.git/commondir, a planted submodule gitdir, a
// nested .git, an include target) and have the operator's next git status run a
// program. The audit finds every place inside the repository from which Git reads
// configuration or hooks, compares it with a baseline taken at launch, and moves
// aside whatever new or changed thing can make Git run a program.
//
// It never runs git on the repository (that is what fires the payload): config files
// are parsed by gitconfig.Parse. It never follows a symlink out of the repository, opens
// files without following symlinks and non-blocking, and bounds its walk; what it
// could not inspect is reported, never skipped silently.
package audit

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/hostpath"
	"github.com/agentbox/agentbox/internal/termsafe"
	"github.com/agentbox/agentbox/internal/treewalk"
)

// ItemKind says what role a path plays in Git's exec surface.
type ItemKind string

// The kinds of items the audit records.
const (
	KindConfig     ItemKind = "config"         // a config file Git reads: config, config.worktree, an include target
	KindHook       ItemKind = "hook"           // an entry of a hooks directory
	KindHooksDir   ItemKind = "hooks dir"      // a hooks directory that is a symlink
	KindCommonDir  ItemKind = "commondir"      // a gitdir's commondir pointer
	KindGitPointer ItemKind = "gitdir pointer" // a .git file ("gitdir: …") or a .git symlink
	KindGitmodules ItemKind = ".gitmodules"    // a .gitmodules file
	KindTodo       ItemKind = "rebase todo"    // a sequencer todo list, which may hold exec lines
	KindProgram    ItemKind = "program"        // a file inside the repository that a config entry runs
	KindBlocker    ItemKind = "blocker"        // a FIFO, socket or device where Git opens a file (audit_blockers_linux.go)
	KindOutLink    ItemKind = "link out"       // a symlink out of the repository where Git writes (audit_outlinks_linux.go)
	KindUnaudited  ItemKind = "unaudited"      // a place the audit could not see into (Skip.Blind)
)

// isCode says whether an item's content is what Git runs, so that any change to it
// matters, not only a new danger.
func (k ItemKind) isCode() bool { return k == KindHook || k == KindProgram }

// Item is one path of the exec surface as the audit found it.
type Item struct {
	Path    string   // absolute, its parent free of symlinks
	Kind    ItemKind //
	Sum     string   // fingerprint: file type, mode and content hash, or link target
	Link    string   // the symlink's target as written; "" when Path is not a symlink
	Dangers []string // what in it can make Git run a program, one phrase each
	// Watch is harmless as found but must not appear or change during a session: a
	// symlink in the exec surface, a gitdir pointer leading out of the repository.
	Watch string
}

// Surface is a repository's exec surface at one moment.
type Surface struct {
	Repo    string
	Items   map[string]*Item // by Path
	Skipped []Skip           // places that could not be inspected
	// Walk is the working-tree walk with every entry's type and ctime, when
	// ScanOptions.Walk asked for it (the shadow recorder reuses it); never stored.
	Walk *treewalk.Walk
	// Launch is what ScanOptions.Watch kept for the end scan; never stored. The
	// caller stops or closes it.
	Launch *Launch `json:"-"`
	// Now is where the repository lies now: ScanOptions.Held's present path,
	// Repo when it was not moved (audit_held_linux.go); never stored.
	Now string `json:"-"`
	// configsHandled counts the config entries the scan handled (spendConfigs).
	configsHandled int
	// Removed: the held directory was removed (it was empty then), or not read
	// (ScanOptions.GitDirsOnly); nothing of it was scanned. Never stored.
	Removed bool `json:"-"`
	// MovedGitDirs are the ScanOptions.HeldGitDirs no longer at their launch
	// path: where each lies now, by launch path ("" when it was removed). Never
	// stored.
	MovedGitDirs map[string]string `json:"-"`
	place                          // for the quarantine
	taken        int               // directories whose listing ScanOptions.Since stood for
	// refreshed: entries of those listings lstat'ed again (a file changed in place)
	refreshed int
	shared    bool // the walk is ScanOptions.Since's launch walk, taken whole
}

// place is where a scan's paths lie, for the quarantine of what it found.
type place struct {
	roots   []string // the repository and ScanOptions.GitDirs, where they lie now
	holds   []heldAt // ScanOptions.Held and HeldGitDirs (audit_held_linux.go)
	journal string   // ScanOptions.WidenJournal
}

// launchPath is the scan's path p as the launch scan, before the held
// directories were moved, had it.
func (p place) launchPath(at string) string {
	h := p.holder(at)
	if h == nil || h.now == h.h.Path {
		return at
	}
	return h.h.Path + at[len(h.now):]
}

// Taken is how many directories' listings the scan took from ScanOptions.Since.
func (s *Surface) Taken() int { return s.taken }

// Skip is a place the audit could not inspect, and why.
type Skip struct {
	Path   string
	Reason string
	// Blind: the user's Git may still read or run something there (a directory
	// the user owns but the audit could not list, one too deep or too long a
	// path): after a session it is moved aside (audit_unreadable_linux.go).
	Blind bool
	stuck bool // blind, and cannot be moved: the repository itself, or the rest of the tree
}

// ScanOptions bound and extend a scan. The zero value is usable.
type ScanOptions struct {
	// HostConfigs are config files outside the repository that Git reads for it (the
	// system and global files, HostConfigFiles): their include targets and
	// core.hooksPath inside the repository are audited.
	HostConfigs []string
	// GitDirs are Git directories outside the repository that the sandbox can write
	// (a linked worktree's gitdir and its common dir, see OutsideGitDirs): each is
	// audited as a gitdir, and paths below them count as inside the repository.
	GitDirs []string
	// Home expands "~/" in include paths and core.hooksPath.
	Home string
	// MaxEntries bounds the directory entries the walk visits (default 2,000,000).
	MaxEntries int
	// MaxDepth bounds the directory depth of the working-tree walk (default 256).
	MaxDepth int
	// MaxConfigEntries bounds the config entries the scan handles in all, counting
	// a file's entries each time a config that includes it is read (default
	// 2,097,152): configs past it are reported as not audited.
	MaxConfigEntries int
	// Walk: lstat every working-tree entry and return the walk in Surface.Walk.
	Walk bool
	// WalkHint, with Walk, is how many entries the walk is expected to hold (a
	// previous walk's): its list is allocated once instead of grown, copied and
	// page-faulted in as it doubles.
	WalkHint int
	// Watch: mark each working-tree directory before reading it (treewatch) and
	// keep its listing, in Surface.Launch, for a later scan's Since. Where the
	// kernel cannot watch, Surface.Launch is nil and nothing else changes.
	Watch bool `json:"-"`
	// Since is an earlier scan's Surface.Launch, stopped: each directory whose
	// listing it kept and that its watch saw unchanged is taken from it instead of
	// read again (audit_since_linux.go). Everything else is read as without it.
	// The scan may build its walk in the earlier scan's walk list (that scan's
	// Surface.Walk.Entries): nothing may read that list after it.
	Since *Launch `json:"-"`
	// SkipKernelMounts: do not walk a kernel filesystem (proc, sysfs, cgroup …)
	// mounted in the tree (audit_pseudo_linux.go). agentbox audit sets it; it costs
	// a read of the mount table.
	SkipKernelMounts bool `json:"-"`
	// Held is the repository's directory held open since the launch (Hold): the
	// scan reads it through its descriptor, wherever it lies now; repo must be
	// its Path (audit_held_linux.go).
	Held *Held `json:"-"`
	// HeldGitDirs are GitDirs held open since the launch, each with its Path one
	// of GitDirs: the scan reads each, as Held, wherever it lies now.
	HeldGitDirs []*Held `json:"-"`
	// GitDirsOnly: the repository is not read (it is another directory now than
	// the one the baseline saw): only GitDirs are scanned, as when the held
	// repository was removed (Surface.Removed).
	GitDirsOnly bool `json:"-"`
	// WidenJournal is where the modes the scan and the quarantine widen are
	// journaled (internal/widen); "" journals nothing.
	WidenJournal string `json:"-"`
	moves        int    // scans made again because Held moved meanwhile
}

// Finding is one thing the audit reports.
type Finding struct {
	Path    string
	Kind    ItemKind // "" for a place that could not be inspected
	Reasons []string
	// Moved is where Quarantine put the item; "" when it was not moved.
	Moved string
	// MoveErr says why the item could not be moved.
	MoveErr error
	blind   bool // a place the audit could not see into and that cannot be moved
	place        // the scan's: the quarantine widens modes below its roots
}

// Unresolved reports whether the finding leaves in place something the user's
// Git may read or run: an item that was not moved, or a place the audit could
// neither see into nor move, or only rename in place (whatever it holds is still
// there to cd into). A session with one fails. An item that was not there to move
// is not one.
func (f Finding) Unresolved() bool {
	if f.Kind == KindUnaudited && f.Moved != "" {
		for _, r := range f.roots {
			if hostpath.Within(f.Moved, r) {
				return true
			}
		}
	}
	return f.blind || f.Kind != "" && f.Moved == "" && !errors.Is(f.MoveErr, fs.ErrNotExist)
}

// String renders the finding as one line.
// maxShownReasons bounds the reasons a finding's line names: a config of a million
// dangerous entries is one line of a few kilobytes on the terminal and in the
// record, not of tens of megabytes.
const maxShownReasons = 16

func (f Finding) String() string {
	var b strings.Builder
	b.WriteString(oneLine(f.Path))
	if f.Kind != "" {
		fmt.Fprintf(&b, " (%s)", f.Kind)
	}
	b.WriteString(": ")
	rs := f.Reasons
	if len(rs) > maxShownReasons+1 {
		// The last reason stays: it says what --fix did.
		rs = append(append(slices.Clip(rs[:maxShownReasons]), fmt.Sprintf("… and %d more", len(rs)-maxShownReasons-1)), rs[len(rs)-1])
	}
	// A reason names what the session chose — a config entry's name (a subsection
	// holds any byte but newline and NUL), a hook's file name, an error quoting a
	// path — and this line reaches the Go API's caller and a writer that keeps
	// newlines as it is: each reason on one line, with no rune a terminal acts on.
	for i, r := range rs {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(termsafe.String(r))
	}
	switch {
	case f.Moved != "":
		fmt.Fprintf(&b, "; moved to %s", oneLine(f.Moved))
	case f.MoveErr != nil:
		fmt.Fprintf(&b, "; NOT moved: %s", termsafe.String(f.MoveErr.Error()))
	}
	return b.String()
}

// oneLine keeps a hostile path on one line and free of terminal controls
// (termsafe): quoted when it needs it; a plain path with blanks stays as it is.
func oneLine(s string) string {
	if termsafe.Safe(s) && !strings.ContainsAny(s, "\"\\") {
		return s
	}
	return termsafe.Quote(s)
}

// Compare returns what in cur must be reported. With a baseline (the launch-time
// scan), that is every item that is new or changed and has a danger the baseline's
// version of it did not have, or whose Watch is new: what was dangerous
// before the session is the user's own and is left alone. Without a baseline (base
// nil, an on-demand audit), it is every item with a danger. Places cur could not
// inspect are always reported.
func Compare(base, cur *Surface) []Finding {
	var out []Finding
	paths := make([]string, 0, len(cur.Items))
	for p := range cur.Items {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		it := cur.Items[p]
		var reasons []string
		if base == nil {
			reasons = it.Dangers
		} else {
			reasons = changed(base.Items[cur.launchPath(p)], it)
		}
		if len(reasons) > 0 {
			out = append(out, Finding{Path: p, Kind: it.Kind, Reasons: reasons, place: cur.place})
		}
	}
	for _, s := range cur.Skipped {
		out = append(out, skipFinding(s, cur.place))
	}
	return out
}

// skipFinding is the finding for a place the scan could not inspect: a blind one
// is moved aside, or, when it cannot be, says what to do.
func skipFinding(s Skip, pl place) Finding {
	f := Finding{Path: s.Path, Reasons: []string{"not audited: " + s.Reason}, place: pl}
	switch {
	case s.Blind && s.stuck:
		f.blind = true
		f.Reasons = append(f.Reasons, "your Git may run what a session planted there: check it (agentbox audit) before running git in it")
	case s.Blind:
		f.Kind = KindUnaudited
	}
	return f
}

// changed says what about it is new since old (nil: it did not exist). Dangers and
// Watch are compared even when the content is the same: some depend on the tree
// around the file (a core.worktree or gitdir path that became a symlink out).
func changed(old, it *Item) []string {
	if old != nil && old.Sum != it.Sum && it.Kind.isCode() && (len(it.Dangers) > 0 || it.Watch != "") {
		// The user's own hook or program, rewritten: the new content runs.
		reasons := append([]string{"changed"}, it.Dangers...)
		if it.Watch != "" {
			reasons = append(reasons, it.Watch)
		}
		return reasons
	}
	reasons := newDangers(old, it)
	if it.Watch != "" && (old == nil || old.Watch != it.Watch) {
		reasons = append(reasons, "new: "+it.Watch)
	}
	return reasons
}

// newDangers returns the dangers of it that old did not have.
func newDangers(old, it *Item) []string {
	if old == nil {
		return it.Dangers
	}
	had := map[string]bool{}
	for _, d := range old.Dangers {
		had[d] = true
	}
	var out []string
	for _, d := range it.Dangers {
		if !had[d] {
			out = append(out, d)
		}
	}
	return out
}

// NewAuditID returns an identifier for quarantine names: the UTC time, then this
// process's ID and the clock's nanoseconds, so two sessions do not pick the same name
// (and Quarantine never replaces a file if they did). Not getrandom: its first call in
// a process maps the vDSO's random state, a cost worth nothing for uniqueness that
// the PID and the clock already give.
func NewAuditID() string {
	now := time.Now().UTC()
	return now.Format("20060102T150405Z") + "-" + strconv.Itoa(os.Getpid()) + "-" + strconv.Itoa(now.Nanosecond())
}

// QuarantineSuffix is inserted between an item's name and the session id.
const QuarantineSuffix = ".agentbox-quarantine-"
