package agentcfg

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/safepath"
)

// The ledger makes the audit hold when the launcher is killed and when sessions
// overlap. It lives in agentbox's state directory (never inside a kept path:
// policy refuses that, and HOME is an overlay inside), in agents/:
//
//	lock           flock'd exclusively while a launcher reads or changes the ledger
//	baseline.json  path → the file as it was before the first of the live sessions
//	               that keep it began: "the last state known not to be a session's"
//	live/ID.json   one per session (its Options), flock'd by its launcher for the
//	               session's whole life
//
// A session's baseline for a file is the ledger's when another live session keeps
// that file too — whatever is there now may be that session's plant — and a fresh
// read otherwise. A live/ file nobody holds is a launcher that died before its audit:
// the next launch runs that audit, against the ledger's baseline, before its own.
// An entry leaves the ledger when no live session keeps its file any more.

// Session is one session's registration in the ledger.
type Session struct {
	dir  string
	opt  Options
	base *Baseline
	live *os.File // live/ID.json, flock'd
}

type ledgerFile struct {
	Files map[string]*stored `json:"files"`
}

// stored is a fileState as the ledger keeps it.
type stored struct {
	Format format `json:"format"`
	Auto   bool   `json:"auto,omitempty"`
	Exists bool   `json:"exists"`
	Odd    string `json:"odd,omitempty"`
	Link   string `json:"link,omitempty"`
	Stamp  string `json:"stamp,omitempty"`
	Mode   uint32 `json:"mode,omitempty"`
	Data   []byte `json:"data,omitempty"`
}

// Orphan is the audit of a session whose launcher died before it.
type Orphan struct {
	ID       string
	Findings []Finding
}

// Begin registers a session and returns it with its baseline taken, after auditing
// the sessions whose launchers died. stateDir is agentbox's state directory.
func Begin(stateDir string, opt Options) (*Session, []Orphan, error) {
	dir := filepath.Join(stateDir, "agents")
	if err := os.MkdirAll(filepath.Join(dir, "live"), 0o700); err != nil {
		return nil, nil, fmt.Errorf("kept-path audit: %w", err)
	}
	unlock, err := lock(dir)
	if err != nil {
		return nil, nil, err
	}
	defer unlock()
	led := loadLedger(dir)
	orphans, others := reapDead(dir, led, true)

	s := &Session{dir: dir, opt: opt, base: &Baseline{opt: opt}}
	sharedBy := func(p string) bool {
		for _, o := range others {
			if o.kept(p) {
				return true
			}
		}
		return false
	}
	left := int64(maxReadBytes)
	r := opt.relaxer()
	defer r.Restore()
	take := func(p string, f format) *fileState {
		if sharedBy(p) {
			if st, ok := led.Files[p]; ok {
				return st.state(p, opt.Repo)
			}
			// Kept by a live session whose baseline does not hold it: it did not
			// exist when the first of them began (each records all it covers), so
			// whatever is there now is a session's.
			st := &fileState{path: p, f: f, auto: f == auto}
			led.Files[p] = toStored(st)
			return st
		}
		st := read(p, f, opt.Repo, &left, r)
		led.Files[p] = toStored(st)
		return st
	}
	seen := map[string]bool{}
	list, over, _, _ := opt.covered(r)
	s.base.over = over
	for _, c := range list {
		s.base.files = append(s.base.files, take(c.path, c.f))
		seen[c.path] = true
	}
	for _, st := range append([]*fileState(nil), s.base.files...) {
		for _, p := range programPaths(st.entries, opt.Home) {
			if !seen[p] && opt.kept(p) {
				seen[p] = true
				s.base.files = append(s.base.files, take(p, wholeFile))
			}
		}
	}
	if err := saveLedger(dir, led); err != nil {
		return nil, orphans, err
	}
	live, err := register(dir, opt)
	if err != nil {
		return nil, orphans, err
	}
	s.live = live
	return s, orphans, nil
}

// Finish runs the session's audit and leaves the ledger.
func (s *Session) Finish() []Finding {
	unlock, err := lock(s.dir)
	if err != nil {
		return []Finding{{Path: s.dir, What: "not audited: " + err.Error()}}
	}
	defer unlock()
	out := s.base.Audit()
	s.leave()
	return out
}

// leave unregisters the session and drops the ledger's entries that no live
// session keeps any more; the lock is held.
func (s *Session) leave() {
	os.Remove(filepath.Join(s.dir, "live", s.opt.ID+".json"))
	s.live.Close()
	led := loadLedger(s.dir)
	_, others := reapDead(s.dir, led, false)
	for p := range led.Files {
		keep := false
		for _, o := range others {
			keep = keep || o.kept(p)
		}
		if !keep {
			delete(led.Files, p)
		}
	}
	saveLedger(s.dir, led)
}

// reapDead audits every registered session whose launcher is gone, against the
// ledger's baseline, and returns those audits and the live sessions' options.
// With !reap, a dead session counts as live: its audit is left to the next launch.
func reapDead(dir string, led *ledgerFile, reap bool) ([]Orphan, []Options) {
	names, _ := filepath.Glob(filepath.Join(dir, "live", "*.json"))
	sort.Strings(names)
	var orphans []Orphan
	var live []Options
	for _, name := range names {
		f, err := os.OpenFile(name, os.O_RDWR|unix.O_NOFOLLOW, 0)
		if err != nil {
			continue
		}
		var opt Options
		data, rerr := io.ReadAll(io.LimitReader(f, 1<<20))
		if rerr == nil {
			rerr = json.Unmarshal(data, &opt)
		}
		if !reap || unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
			f.Close()
			if rerr == nil {
				live = append(live, opt) // held: its launcher lives
			}
			continue
		}
		if rerr == nil && opt.ID != "" {
			b := &Baseline{opt: opt}
			r := opt.relaxer()
			list, _, _, _ := opt.covered(r)
			r.Restore()
			for _, c := range list {
				if st, ok := led.Files[c.path]; ok {
					b.files = append(b.files, st.state(c.path, opt.Repo))
				}
			}
			for p, st := range led.Files {
				if st.Format == wholeFile && opt.kept(p) && !b.has(p) {
					b.files = append(b.files, st.state(p, opt.Repo))
				}
			}
			orphans = append(orphans, Orphan{ID: opt.ID, Findings: b.Audit()})
		}
		os.Remove(name)
		f.Close()
	}
	return orphans, live
}

func (b *Baseline) has(p string) bool {
	for _, f := range b.files {
		if f.path == p {
			return true
		}
	}
	return false
}

// register writes live/ID.json and holds its lock for the session's life.
func register(dir string, opt Options) (*os.File, error) {
	if strings.ContainsAny(opt.ID, "/\x00") || opt.ID == "" {
		return nil, fmt.Errorf("kept-path audit: bad session id %q", opt.ID)
	}
	f, err := os.OpenFile(filepath.Join(dir, "live", opt.ID+".json"), os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("kept-path audit: %w", err)
	}
	// A registration left empty (a full disk) would stand for no session.
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		os.Remove(f.Name())
		f.Close()
		return nil, fmt.Errorf("kept-path audit: lock: %w", err)
	}
	data, _ := json.Marshal(opt)
	if _, err := f.Write(data); err != nil {
		os.Remove(f.Name())
		f.Close()
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the file's name is this session's, not the user's to act on
		}
		return nil, fmt.Errorf("kept-path audit: cannot write its ledger in %s: %w", dir, err)
	}
	return f, nil
}

func lock(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("kept-path audit: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("kept-path audit: lock: %w", err)
	}
	return func() { f.Close() }, nil
}

// loadLedger reads baseline.json; a missing or unreadable one is empty.
func loadLedger(dir string) *ledgerFile {
	led := &ledgerFile{}
	f, err := safepath.OpenRegular(filepath.Join(dir, "baseline.json"))
	if err == nil {
		data, rerr := io.ReadAll(io.LimitReader(f, 64*MaxFileBytes))
		f.Close()
		if rerr == nil {
			_ = json.Unmarshal(data, led)
		}
	}
	if led.Files == nil {
		led.Files = map[string]*stored{}
	}
	return led
}

func saveLedger(dir string, led *ledgerFile) error {
	path := filepath.Join(dir, "baseline.json")
	if len(led.Files) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("kept-path audit: %w", err)
		}
		return nil
	}
	data, err := json.Marshal(led)
	if err != nil {
		return fmt.Errorf("kept-path audit: %w", err)
	}
	tmp := path + ".tmp"
	os.Remove(tmp)
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("kept-path audit: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("kept-path audit: %w", err)
	}
	return nil
}

func toStored(st *fileState) *stored {
	return &stored{Format: st.f, Auto: st.auto, Exists: st.exists, Odd: st.odd, Link: st.link, Stamp: st.stamp, Mode: st.mode, Data: st.data}
}

func (s *stored) state(path, repo string) *fileState {
	st := &fileState{path: path, f: s.Format, auto: s.Auto, exists: s.Exists, odd: s.Odd, link: s.Link, stamp: s.Stamp, mode: s.Mode, data: s.Data}
	if st.exists && st.odd == "" {
		st.entries, st.parsed = entries(st.f, st.data, repo)
	}
	return st
}
