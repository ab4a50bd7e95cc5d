package shadow

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// PruneOptions say what agentbox gc removes from the shadow store.
type PruneOptions struct {
	StateDir string
	// OlderThan removes the sessions that ended (or, incomplete, started) longer
	// ago than this; 0 keeps every session of a repository that still exists.
	OlderThan time.Duration
	Now       time.Time // zero: time.Now()
	DryRun    bool      // list, remove nothing
}

// Pruned is one thing Prune removed (or, with DryRun, would remove).
type Pruned struct {
	Path string // the shadow repository
	Repo string // the recorded repository
	What string // "repository gone" or "N sessions older than D"
	// Sessions is how many old sessions were pruned (0: the whole store went,
	// its repository gone).
	Sessions int
	// GoneKept: the repository is gone from its path, but the store is kept for
	// its sessions within OlderThan (Prune).
	GoneKept bool
	Removed  bool
	Err      error
}

// Prune removes the sessions older than opts.OlderThan, then lets Git drop what
// only they used, and the shadow repository of a repository that no longer exists
// once it holds no session within opts.OlderThan (0: never). A path that is gone
// need not be a repository deleted: a session that can write its parent (the
// repository around it, an --add-dir holding it) can move it away, and its records
// would go with the next gc. Each repository is pruned under its lock, so a
// session being recorded is never cut short.
func Prune(opts PruneOptions) ([]Pruned, error) {
	if opts.Now.IsZero() {
		opts.Now = time.Now()
	}
	stores, err := All(opts.StateDir)
	if err != nil {
		return nil, err
	}
	var out []Pruned
	for _, s := range stores {
		if p, ok := s.prune(opts); ok {
			out = append(out, p)
		}
	}
	return out, nil
}

func (s *Store) prune(opts PruneOptions) (Pruned, bool) {
	p := Pruned{Path: s.Dir, Repo: s.Repo}
	_, err := os.Lstat(s.Repo)
	gone := errors.Is(err, fs.ErrNotExist)
	if opts.OlderThan <= 0 {
		p.GoneKept = gone
		return p, gone
	}
	unlock, err := s.lock()
	if err != nil {
		p.Err = err
		return p, true
	}
	defer unlock()
	cutoff := opts.Now.Add(-opts.OlderThan)
	if gone {
		if young, err := s.sessionSince(cutoff); err != nil || young {
			p.GoneKept, gone = true, false // its sessions age as any others
		}
	}
	if gone {
		p.What = "repository gone"
		if !opts.DryRun {
			// The lock file goes with the directory; a session that waits for
			// it would record into a removed directory, and one that starts
			// later makes a fresh store.
			if p.Err = os.RemoveAll(s.Dir); p.Err == nil {
				p.Removed = true
			}
		}
		return p, true
	}
	old, err := s.oldSessions(cutoff)
	if err != nil {
		p.Err = err
		return p, true
	}
	if len(old) == 0 {
		return p, p.GoneKept
	}
	p.What = fmt.Sprintf("%d sessions older than %s", len(old), opts.OlderThan)
	p.Sessions = len(old)
	if opts.DryRun {
		return p, true
	}
	var stdin strings.Builder
	for _, ref := range old {
		fmt.Fprintf(&stdin, "delete %s\n", ref)
		// The session's checkpoints (checkpoint.go), when it has any.
		if id := strings.TrimPrefix(ref, sessionRefs); id != ref {
			if step, _ := s.readRef(stepRefs + id); step != "" {
				fmt.Fprintf(&stdin, "delete %s\n", stepRefs+id)
			}
		}
	}
	if _, err := s.git.run(strings.NewReader(stdin.String()), "update-ref", "--stdin"); err != nil {
		p.Err = err
		return p, true
	}
	// Every writer holds the lock we hold: what no ref reaches now is garbage. The
	// stage state names a tree that only pruned sessions may have held: the next
	// record sweeps (changed.go).
	s.dropStage()
	if _, err := s.git.run(nil, "gc", "--quiet", "--prune=now"); err != nil {
		p.Err = err
		return p, true
	}
	p.Removed = true
	return p, true
}

// oldSessions lists the session refs whose commit is older than cutoff.
func (s *Store) oldSessions(cutoff time.Time) ([]string, error) {
	times, err := s.sessionTimes()
	if err != nil {
		return nil, err
	}
	var old []string
	for ref, t := range times {
		if t.Before(cutoff) {
			old = append(old, ref)
		}
	}
	sort.Strings(old)
	return old, nil
}

// sessionSince reports whether a session's commit is at or after cutoff (one whose
// time cannot be read counts as such).
func (s *Store) sessionSince(cutoff time.Time) (bool, error) {
	times, err := s.sessionTimes()
	if err != nil {
		return false, err
	}
	for _, t := range times {
		if !t.Before(cutoff) {
			return true, nil
		}
	}
	return false, nil
}

// sessionTimes are the session refs and their commits' times (the far future for
// one whose time cannot be read, so that it is never old).
func (s *Store) sessionTimes() (map[string]time.Time, error) {
	out, err := s.git.out("for-each-ref", "--format=%(committerdate:unix) %(refname)", sessionRefs)
	if err != nil {
		return nil, err
	}
	times := map[string]time.Time{}
	for _, line := range strings.Split(out, "\n") {
		ts, ref, ok := strings.Cut(line, " ")
		if !ok || !strings.HasPrefix(ref, sessionRefs) {
			continue
		}
		if sec, err := strconv.ParseInt(ts, 10, 64); err == nil {
			times[ref] = time.Unix(sec, 0)
		} else {
			times[ref] = time.Unix(1<<62, 0)
		}
	}
	return times, nil
}
