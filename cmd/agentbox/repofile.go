package main

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/agentbox/agentbox/config"
	"github.com/agentbox/agentbox/policy"
	"github.com/agentbox/agentbox/session"
)

// A repository's own file (config.RepoFile) is written by the sandbox, so it may only
// narrow what the user chose. Whether it does is judged on the sandbox, not on its
// keys: the policy is made without the file and with it, and the file is accepted
// only when the session with it is within the session without it (session.Narrows).
// An empty allow-net list, say, is a subset of the user's hosts but no network
// namespace at all; it is refused.

// clone returns a copy of a, with its own lists, and the flag set that writes it.
func (a *execArgs) clone() (*execArgs, *flag.FlagSet) {
	c := new(execArgs)
	fs := c.flags()
	*c = *a
	// Every list, so that what the copy's flags append cannot reach a's.
	o := reflect.ValueOf(&c.opts).Elem()
	for i := range o.NumField() {
		if f := o.Field(i); f.Kind() == reflect.Slice && !f.IsNil() {
			f.Set(reflect.AppendSlice(reflect.MakeSlice(f.Type(), 0, f.Len()), f))
		}
	}
	c.cfg.Args = slices.Clone(a.cfg.Args)
	return c, fs
}

// applyRepoFile reads the repository's file and, when it only narrows, lays it over
// a (whose flags fs writes) and returns the policy made again, and what it narrowed,
// for stderr. A file that would widen anything is refused, naming its key.
func applyRepoFile(a *execArgs, fs *flag.FlagSet, prov map[string]string, pol *policy.Policy) (*policy.Policy, []string, error) {
	rf, err := config.ReadRepo(filepath.Join(pol.Repo, config.RepoFile))
	if err != nil || rf == nil {
		return pol, nil, err
	}
	return narrowBy(a, fs, prov, pol, rf)
}

// narrowBy is applyRepoFile for a file already read.
func narrowBy(a *execArgs, fs *flag.FlagSet, prov map[string]string, pol *policy.Policy, rf *config.File) (*policy.Policy, []string, error) {
	if len(rf.Profiles) > 0 || rf.Profile != "" {
		return nil, nil, &config.Error{File: rf.Path, Key: "profile", Reason: "profiles belong in the user's config file, not in a repository's: the sandbox can write it"}
	}
	before := a.cfg
	before.Policy = pol
	tr, err := narrowTrial(a, prov, &before, rf.Top)
	if err != nil {
		return nil, nil, blame(a, prov, &before, rf, err)
	}
	changed := narrowed(fs, tr.fs, rf.Top)
	*a = *tr.args // fs writes a's fields: it now shows the narrowed values
	clear(prov)
	maps.Copy(prov, tr.prov)
	notes := tr.notes
	if changed != "" {
		notes = append([]string{rf.Path + " narrows this session: " + changed}, notes...)
	}
	return tr.cfg.Policy, notes, nil
}

// trial is exec's settings with a repository file's laid over a copy of them.
type trial struct {
	args  *execArgs
	fs    *flag.FlagSet // writes args
	prov  map[string]string
	cfg   session.Config // the session args describe
	notes []string       // the contradictions settled (narrowerWins)
}

// narrowTrial lays settings over a copy of a; an error says that the session it
// makes is not within before, or cannot be made.
func narrowTrial(a *execArgs, prov map[string]string, before *session.Config, settings []config.Setting) (*trial, error) {
	c, fs := a.clone()
	tr := &trial{args: c, fs: fs, prov: maps.Clone(prov)}
	if err := config.Narrow(fs, settings, tr.prov); err != nil {
		return nil, err
	}
	tr.notes = narrowerWins(&c.opts, tr.prov)
	p, err := policy.New(c.opts)
	if err != nil {
		return nil, err
	}
	tr.cfg = c.cfg
	tr.cfg.Policy = p
	if err := session.Narrows(before, &tr.cfg); err != nil {
		return nil, err
	}
	return tr, nil
}

// blame turns a refused repository file into one line naming the file, and for a
// widening the first key from which on the file widens the session.
func blame(a *execArgs, prov map[string]string, before *session.Config, rf *config.File, err error) error {
	var ce *config.Error
	if errors.As(err, &ce) {
		return err
	}
	var w *policy.Widening
	if !errors.As(err, &w) {
		return fmt.Errorf("config %s: %w", rf.Path, err)
	}
	why := "; a repository's file may only narrow the user's policy (the sandbox can write it): remove the key, or change it in your own config or on the command line"
	for i, s := range rf.Top {
		if _, e := narrowTrial(a, prov, before, rf.Top[:i+1]); e != nil {
			return &config.Error{File: s.File, Line: s.Line, Key: s.Key, Reason: e.Error() + why}
		}
	}
	return &config.Error{File: rf.Path, Reason: w.Error() + why}
}

// narrowed lists, for the keys of settings, each value that differs between the
// flag sets from and to.
func narrowed(from, to *flag.FlagSet, settings []config.Setting) string {
	var out []string
	for _, s := range settings {
		f, t := from.Lookup(s.Key), to.Lookup(s.Key)
		if f == nil || t == nil || f.Value.String() == t.Value.String() {
			continue
		}
		out = append(out, fmt.Sprintf("%s %s → %s", s.Key, shown(f.Value.String()), shown(t.Value.String())))
	}
	return strings.Join(out, "; ")
}

func shown(v string) string {
	if v == "" {
		return "(none)"
	}
	return v
}

// narrowerWins settles a contradiction between two settings that were not both
// typed on the command line: the narrower one wins (offline over allow-net,
// read-only over add-dir), and the lines it returns say so and where each came
// from. Both typed are left for policy.New to refuse.
func narrowerWins(o *policy.Options, prov map[string]string) []string {
	var notes []string
	for _, c := range []struct {
		narrow, wide string
		on           bool
		list         *[]string
		means        string
	}{
		{"offline", "allow-net", o.Offline, &o.AllowNet, "the session has no network at all"},
		{"read-only", "add-dir", o.ReadOnly, &o.AddDir, "the session writes no host directory but kept paths"},
	} {
		if !c.on || len(*c.list) == 0 || (prov[c.narrow] == "command line" && prov[c.wide] == "command line") {
			continue
		}
		notes = append(notes, fmt.Sprintf("%s (%s) wins over %s %s (%s): %s",
			c.narrow, origin(prov, c.narrow), c.wide, strings.Join(*c.list, ","), origin(prov, c.wide), c.means))
		*c.list = nil
		delete(prov, c.wide)
	}
	return notes
}

func origin(prov map[string]string, key string) string {
	if w, ok := prov[key]; ok {
		return w
	}
	return "default"
}
