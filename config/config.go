// Package config reads agentbox's policy files and lays them onto the exec command's
// flags, so that a file can say anything a flag can and nothing more:
//
//   - the user's file, ${XDG_CONFIG_HOME:-~/.config}/agentbox/config.toml: defaults for
//     every exec flag (keys are the flag names: offline = true, keep-agent = ["claude"])
//     and named profiles ([profile.claude], chosen with --profile NAME or a top-level
//     default-profile = "NAME"). Command-line flags win over it;
//   - a repository's own file, REPO/.agentbox.toml: the sandbox can write it, so it may
//     only narrow the policy — hide more, keep less, allow fewer hosts, go offline or
//     read-only, refuse pushes — and a key that could widen it is refused. Keys are
//     only the first gate: whether the sandbox the file makes is within the one
//     without it is judged on the two policies (policy.Narrows, session.Narrows).
//
// Parsing and narrowing are pure; reading a repository's file never follows a
// symlink or blocks on a FIFO. The TOML parser is github.com/BurntSushi/toml.
package config

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/bytesize"
	"github.com/agentbox/agentbox/internal/safepath"
	"github.com/agentbox/agentbox/internal/tomlbound"
	"github.com/agentbox/agentbox/policy"
)

// MaxSize bounds a policy file: larger is refused, not read.
const MaxSize = 256 << 10

// RepoFile is the name of a repository's own policy file, at its top level.
const RepoFile = ".agentbox.toml"

// Setting is one key = value of a file, with where it was written.
type Setting struct {
	Key     string
	Value   any // bool, int64, string or []string (a TOML float as its text)
	File    string
	Line    int    // 0 when unknown
	Profile string // the profile it belongs to; "" at the top level
}

// Where says where the setting was written, for messages and --dry-run.
func (s Setting) Where() string {
	w := s.File
	if s.Line > 0 {
		w += ":" + strconv.Itoa(s.Line)
	}
	if s.Profile != "" {
		w += " (profile " + s.Profile + ")"
	}
	return w
}

// File is a parsed policy file.
type File struct {
	Path     string
	Top      []Setting
	Profiles map[string][]Setting
	Profile  string // the top level's default-profile = "NAME": the profile used by default
}

// Error is a bad policy file: which file, line and key, and why.
type Error struct {
	File   string
	Line   int
	Key    string
	Reason string
}

func (e *Error) Error() string {
	at := e.File
	if e.Line > 0 {
		at += ":" + strconv.Itoa(e.Line)
	}
	if e.Key != "" {
		return fmt.Sprintf("config %s: %s: %s", at, e.Key, e.Reason)
	}
	return fmt.Sprintf("config %s: %s", at, e.Reason)
}

// Parse reads a policy file's text.
func Parse(path string, data []byte) (*File, error) {
	// The decoder's cost grows with nesting and dotted keys faster than the
	// file's size: a repository's file is bounded before it is decoded.
	if err := tomlbound.Check(data); err != nil {
		return nil, &Error{File: path, Reason: err.Error() + ": not a policy file"}
	}
	var raw map[string]any
	if _, err := toml.Decode(string(data), &raw); err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, &Error{File: path, Line: pe.Position.Line, Key: pe.LastKey, Reason: pe.Message}
		}
		return nil, &Error{File: path, Reason: err.Error()}
	}
	lines := keyLines(data)
	f := &File{Path: path, Profiles: map[string][]Setting{}}
	keys := sortedKeys(raw)
	for _, k := range keys {
		v := raw[k]
		switch k {
		case "default-profile":
			p, ok := v.(string)
			if !ok {
				return nil, &Error{File: path, Line: lines.find("", k), Key: k, Reason: `want a profile name, e.g. default-profile = "claude"`}
			}
			f.Profile = p
		case "profile":
			switch p := v.(type) {
			case map[string]any:
				for _, name := range sortedKeys(p) {
					table, ok := p[name].(map[string]any)
					if !ok {
						return nil, &Error{File: path, Line: lines.find("", "profile."+name), Key: "profile." + name, Reason: "want a table: [profile." + name + "]"}
					}
					var ss []Setting
					for _, kk := range sortedKeys(table) {
						s, err := setting(path, "profile."+name, kk, table[kk], lines)
						if err != nil {
							return nil, err
						}
						s.Profile = name
						ss = append(ss, s)
					}
					f.Profiles[name] = ss
				}
			default:
				return nil, &Error{File: path, Line: lines.find("", k), Key: k, Reason: `profiles are tables, [profile.NAME]; the one used by default is default-profile = "NAME"`}
			}
		default:
			s, err := setting(path, "", k, v, lines)
			if err != nil {
				return nil, err
			}
			f.Top = append(f.Top, s)
		}
	}
	if f.Profile != "" {
		if _, ok := f.Profiles[f.Profile]; !ok {
			return nil, &Error{File: path, Line: lines.find("", "default-profile"), Key: "default-profile", Reason: fmt.Sprintf("no [profile.%s] in this file", f.Profile)}
		}
	}
	return f, nil
}

func setting(path, table, key string, v any, lines keyIndex) (Setting, error) {
	s := Setting{Key: key, File: path, Line: lines.find(table, key)}
	switch x := v.(type) {
	case bool, int64, string:
		s.Value = x
	case float64:
		// cpus = 0.5: the flag reads it as text, and refuses what it cannot hold.
		s.Value = strconv.FormatFloat(x, 'f', -1, 64)
	case []any:
		list := make([]string, 0, len(x))
		for _, e := range x {
			str, ok := e.(string)
			if !ok {
				return s, &Error{File: path, Line: s.Line, Key: key, Reason: "want a list of strings"}
			}
			list = append(list, str)
		}
		s.Value = list
	case map[string]any:
		line, reason := tableMisspelt(key, x, lines)
		if s.Line == 0 {
			s.Line = line
		}
		return s, &Error{File: path, Line: s.Line, Key: key, Reason: reason}
	default:
		return s, &Error{File: path, Line: s.Line, Key: key, Reason: fmt.Sprintf("unsupported value %v", v)}
	}
	return s, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// keyIndex maps "table\x00key" to the line a key is assigned on. The TOML parser does
// not say where a key was written, and a bad value must be named by its line; the
// files here are flat (keys, and one level of [profile.NAME] tables), which a line
// scan reads exactly.
type keyIndex map[string]int

func keyLines(data []byte) keyIndex {
	// Compiled here, not at package level: every agentbox process, the sandbox's
	// init included, would pay for it at start-up, and only a file needs them.
	tableLine := regexp.MustCompile(`^\s*\[\s*([A-Za-z0-9_.\-" ]+?)\s*\]\s*(#.*)?$`)
	keyLine := regexp.MustCompile(`^\s*("?)([A-Za-z0-9_\-]+)("?)\s*=`)
	idx := keyIndex{}
	table := ""
	for i, line := range bytes.Split(data, []byte("\n")) {
		if m := tableLine.FindSubmatch(line); m != nil {
			table = strings.ReplaceAll(strings.ReplaceAll(string(m[1]), `"`, ""), " ", "")
			if _, ok := idx[table+"\x00"]; !ok {
				idx[table+"\x00"] = i + 1
			}
			continue
		}
		if m := keyLine.FindSubmatch(line); m != nil {
			k := table + "\x00" + string(m[2])
			if _, ok := idx[k]; !ok {
				idx[k] = i + 1
			}
		}
	}
	return idx
}

func (idx keyIndex) find(table, key string) int {
	if n, ok := idx[table+"\x00"+key]; ok {
		return n
	}
	return idx[key+"\x00"] // a table header, e.g. profile.claude
}

// ReadUser reads the user's file; a missing file is no file (nil, nil).
func ReadUser(path string) (*File, error) {
	data, err := readBounded(path, false)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, &Error{File: path, Reason: err.Error()}
	}
	return Parse(path, data)
}

// ReadRepo reads a repository's file, which the sandbox may have written: never
// through a symlink, never blocking on a FIFO, never more than MaxSize. Missing: nil.
func ReadRepo(path string) (*File, error) {
	data, err := readBounded(path, true)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, &Error{File: path, Reason: err.Error() + "; remove or fix it"}
	}
	return Parse(path, data)
}

// readBounded reads a policy file of at most MaxSize bytes that is a regular file.
// A repository's (hostile) is never opened through a symlink; the user's may be a
// link into a dotfiles checkout, and what it leads to is opened for reading only
// once it is known to be a regular file (safepath.OpenRegularFollow): a kept
// ~/.config could hold a link to a device a session left there.
func readBounded(path string, hostile bool) ([]byte, error) {
	var f *os.File
	if hostile {
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOFOLLOW, 0)
		if err == unix.ELOOP {
			return nil, errors.New("is a symlink; a repository's policy file must be a regular file")
		}
		if err != nil {
			return nil, &os.PathError{Op: "open", Path: path, Err: err}
		}
		f = os.NewFile(uintptr(fd), path)
	} else {
		var err error
		if f, err = safepath.OpenRegularFollow(path); errors.Is(err, safepath.ErrNotRegular) {
			return nil, errors.New("is not a regular file")
		} else if err != nil {
			return nil, err
		}
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, errors.New("is not a regular file")
	}
	if fi.Size() > MaxSize {
		return nil, fmt.Errorf("is %d bytes, more than the %d a policy file may have", fi.Size(), MaxSize)
	}
	// Read to the end, but never more than the bound: the file may grow meanwhile.
	data, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxSize {
		return nil, fmt.Errorf("grew beyond the %d bytes a policy file may have", MaxSize)
	}
	return data, nil
}

// Selected returns the settings in force from f for profile (or f's default profile
// when profile is empty): the top level, then the profile's.
func (f *File) Selected(profile string) ([]Setting, error) {
	if f == nil {
		if profile != "" {
			return nil, fmt.Errorf("--profile %s: there is no config file with profiles", profile)
		}
		return nil, nil
	}
	out := slices.Clone(f.Top)
	name := profile
	if name == "" {
		name = f.Profile
	}
	if name == "" {
		return out, nil
	}
	p, ok := f.Profiles[name]
	if !ok {
		names := sortedKeys(f.Profiles)
		return nil, fmt.Errorf("--profile %s: %s has no [profile.%s] (it has: %s)", name, f.Path, name, strings.Join(names, ", "))
	}
	return append(out, p...), nil
}

// Check applies every part of f (the top level and each profile) to scratch flag
// sets from newFlags, so that a mistake in a profile not in use today is reported
// now, with its line, rather than on the day it is chosen.
func (f *File) Check(newFlags func() *flag.FlagSet) error {
	if f == nil {
		return nil
	}
	if err := Apply(newFlags(), f.Top, map[string]string{}); err != nil {
		return err
	}
	for _, name := range sortedKeys(f.Profiles) {
		if err := Apply(newFlags(), f.Profiles[name], map[string]string{}); err != nil {
			return err
		}
	}
	return nil
}

// listValue is a repeatable flag's value (cli.List).
type listValue interface {
	flag.Value
	Values() []string
	Replace([]string)
}

// boolFlag is a flag that takes no argument.
type boolFlag interface{ IsBoolFlag() bool }

// notInFiles says whether key is an exec flag that makes no sense in a file.
func notInFiles(key string) bool {
	switch key {
	case "dry-run", "json", "profile", "help":
		return true
	}
	return false
}

// Apply lays settings onto fs, in order, and records in prov where each flag's value
// came from. A list flag given in several settings accumulates (the top level, then
// the profile); the command line, parsed after, adds to it or overrides a scalar.
func Apply(fs *flag.FlagSet, settings []Setting, prov map[string]string) error {
	for _, s := range settings {
		if err := set(fs, s, false); err != nil {
			return err
		}
		prov[s.Key] = s.Where()
	}
	return nil
}

func set(fs *flag.FlagSet, s Setting, replace bool) error {
	bad := func(reason string) error { return &Error{File: s.File, Line: s.Line, Key: s.Key, Reason: reason} }
	if notInFiles(s.Key) {
		return bad("not a setting a file can hold")
	}
	f := fs.Lookup(s.Key)
	if f == nil || strings.HasPrefix(f.Usage, "internal:") {
		return bad("unknown key: keys are the flags of agentbox exec, without the dashes (see agentbox exec --help)")
	}
	if lv, ok := f.Value.(listValue); ok {
		var vals []string
		switch x := s.Value.(type) {
		case []string:
			vals = x
		case string:
			vals = []string{x}
		default:
			return bad("want a list of strings, e.g. [\"a\", \"b\"]")
		}
		if replace {
			lv.Replace(nil)
		}
		for _, v := range vals {
			if err := lv.Set(v); err != nil {
				return bad(err.Error())
			}
		}
		return nil
	}
	var text string
	switch x := s.Value.(type) {
	case bool:
		if b, ok := f.Value.(boolFlag); !ok || !b.IsBoolFlag() {
			return bad("want a value, not true or false")
		}
		text = strconv.FormatBool(x)
	case int64:
		if b, ok := f.Value.(boolFlag); ok && b.IsBoolFlag() {
			return bad("want true or false")
		}
		text = strconv.FormatInt(x, 10)
	case string:
		if b, ok := f.Value.(boolFlag); ok && b.IsBoolFlag() {
			return bad("want true or false")
		}
		text = x
	case []string:
		return bad("takes one value, not a list")
	}
	if err := fs.Set(s.Key, text); err != nil {
		return bad(fmt.Sprintf("invalid value %q: %v", text, err))
	}
	return nil
}

// Narrowing says how a repository's file may change each flag: only ever toward less.
type Narrowing int

const (
	// TrueOnly: the file may switch the flag on (offline, read-only, hide-secrets).
	TrueOnly Narrowing = iota + 1
	// FalseOnly: the file may switch the flag off (allow-git-push, nested-sandbox, ssh-agent, gpu).
	FalseOnly
	// Union: the file may add to the list (hide).
	Union
	// Subset: the file may keep only some of the list (keep, allow-net, add-dir).
	Subset
	// Smaller: the file may lower the size or limit (tmp-size, memory, pids,
	// cpus), or set a limit the user's policy does not have.
	Smaller
)

// repoNarrowing says what a repository's file may do with key. Any key not listed
// could widen the policy (a backend, a snapshot switched off, more writable paths)
// and is refused. A function, not a map: no start-up work for a table.
func repoNarrowing(key string) (Narrowing, bool) {
	switch key {
	case "offline", "read-only", "hide-secrets", "clear-env":
		return TrueOnly, true
	case "allow-git-push", "nested-sandbox", "ssh-agent", "gpu":
		return FalseOnly, true
	case "hide", "unset-env":
		return Union, true
	case "keep", "keep-agent", "allow-net", "add-dir", "allow-socket", "device", "host-port", "publish":
		return Subset, true
	case "tmp-size", "memory", "pids", "cpus":
		return Smaller, true
	}
	return 0, false
}

// RepoKeys lists the keys a repository's file may hold, for messages and docs.
const RepoKeys = "offline, read-only, hide-secrets, clear-env (true only); allow-git-push, nested-sandbox, ssh-agent, gpu (false only); hide, unset-env (adds); keep, keep-agent, allow-net, add-dir, allow-socket, device, host-port, publish (a subset of the user's); tmp-size, memory, pids, cpus (lower only)"

// Narrow applies a repository file's settings after everything else, refusing any
// that is not a narrowing, and records their origin in prov.
func Narrow(fs *flag.FlagSet, settings []Setting, prov map[string]string) error {
	for _, s := range settings {
		bad := func(reason string) error { return &Error{File: s.File, Line: s.Line, Key: s.Key, Reason: reason} }
		rule, ok := repoNarrowing(s.Key)
		if !ok || fs.Lookup(s.Key) == nil {
			return bad("a repository's file may only narrow the policy (" + RepoKeys + "): the sandbox can write it")
		}
		f := fs.Lookup(s.Key)
		switch rule {
		case TrueOnly, FalseOnly:
			b, isBool := s.Value.(bool)
			if !isBool {
				return bad("want true or false")
			}
			if b != (rule == TrueOnly) {
				return bad(fmt.Sprintf("may only be %v in a repository's file: the sandbox can write it", rule == TrueOnly))
			}
			if err := fs.Set(s.Key, strconv.FormatBool(b)); err != nil {
				return bad(err.Error())
			}
		case Union:
			if err := set(fs, s, false); err != nil {
				return err
			}
		case Subset:
			lv, ok := f.Value.(listValue)
			if !ok {
				return bad("not a list flag")
			}
			want, ok := s.Value.([]string)
			if !ok {
				return bad("want a list of strings: the subset of the user's list to keep")
			}
			var kept []string
			for _, v := range lv.Values() {
				if slices.Contains(want, v) {
					kept = append(kept, v)
				}
			}
			lv.Replace(kept)
		case Smaller:
			if err := lower(fs, f, s); err != nil {
				return err
			}
		}
		prov[s.Key] = s.Where() + ", narrowing"
	}
	return nil
}

// lower sets a size or limit flag (tmp-size, memory, pids, cpus) to the file's
// value when that is no larger than the flag's: a repository may give the sandbox
// less, never more.
func lower(fs *flag.FlagSet, f *flag.Flag, s Setting) error {
	bad := func(reason string) error { return &Error{File: s.File, Line: s.Line, Key: s.Key, Reason: reason} }
	text, ok := s.Value.(string)
	if n, isInt := s.Value.(int64); isInt {
		text, ok = strconv.FormatInt(n, 10), true
	}
	if !ok {
		return bad("want a size, e.g. \"1G\", or a number")
	}
	order, format := limitOrder(s.Key)
	want, err := order(text)
	if err != nil {
		return bad(fmt.Sprintf("invalid value %q: %v", text, err))
	}
	have, err := order(f.Value.String())
	if err != nil {
		return bad(err.Error())
	}
	if want > have {
		return bad(fmt.Sprintf("%s is more than the %s the user's policy gives: a repository's file may only lower it (the sandbox can write it)", format(want), format(have)))
	}
	if err := fs.Set(s.Key, text); err != nil {
		return bad(err.Error())
	}
	return nil
}

// limitOrder reads a value of the size or limit flag key as a number that grows
// with what it allows (no limit: the largest), and writes such a number back.
func limitOrder(key string) (order func(string) (int64, error), format func(int64) string) {
	limit := func(parse func(string) (int64, error), format func(int64) string) (func(string) (int64, error), func(int64) string) {
		return func(s string) (int64, error) {
				v, err := parse(s)
				return policy.LimitOrder(v), err
			}, func(v int64) string {
				if v == math.MaxInt64 {
					return "no limit"
				}
				return format(v)
			}
	}
	switch key {
	case "memory":
		return limit(func(s string) (int64, error) { return policy.MemoryLimit(s, policy.TotalRAM()) }, bytesize.Format)
	case "pids":
		return limit(func(s string) (int64, error) { return policy.PidsLimit(s, policy.PidMax()) }, func(n int64) string { return strconv.FormatInt(n, 10) })
	case "cpus":
		return limit(func(s string) (int64, error) { return policy.CPULimit(s, runtime.NumCPU()) }, func(n int64) string { return policy.FormatCPUs(n) + " CPUs" })
	}
	return func(s string) (int64, error) { return policy.TmpSize(s, policy.TotalRAM()) }, bytesize.Format
}
