package shadow

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
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
	Removed  bool
	Err      error
}

// Prune removes the shadow repositories of repositories that no longer exist, and
// the sessions older than opts.OlderThan of the others, then lets Git drop what
// only they used. Each repository is pruned under its lock, so a session being
// recorded is never cut short.
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
	if !gone && opts.OlderThan <= 0 {
		return p, false
	}
	unlock, err := s.lock()
	if err != nil {
		p.Err = err
		return p, true
	}
	defer unlock()
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
	old, err := s.oldSessions(opts.Now.Add(-opts.OlderThan))
	if err != nil {
		p.Err = err
		return p, true
	}
	if len(old) == 0 {
		return p, false
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
	out, err := s.git.out("for-each-ref", "--format=%(committerdate:unix) %(refname)", sessionRefs)
	if err != nil {
		return nil, err
	}
	var old []string
	for _, line := range strings.Split(out, "\n") {
		ts, ref, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		sec, err := strconv.ParseInt(ts, 10, 64)
		if err == nil && time.Unix(sec, 0).Before(cutoff) && strings.HasPrefix(ref, sessionRefs) {
			old = append(old, ref)
		}
	}
	return old, nil
}
