package hostaudit

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/gitguard/audit"
)

// The journal is written on every launch, before the command starts, so its format
// is one that is cheap to write: a line per field, strings quoted as Go quotes them.
// encoding/json's first use would cost every launch its reflection set-up, and JSON
// cannot hold a path that is not UTF-8, which strconv.Quote keeps byte for
// byte.
//
//	agentbox audit journal 1
//	repo "/home/me/repo"
//	for "/home/me/main"                    an --add-dir directory's: the session's repository
//	pid 4242
//	start 2026-11-30T06:17:20.123456789Z
//	id "…"
//	hostconfig "/etc/gitconfig"            one per ScanOptions.HostConfigs
//	gitdir "…"                             one per ScanOptions.GitDirs
//	ident "path" "dev" "ino" "birth"       the repository's and each gitdir's identity (audit.DirID)
//	home "/home/me"
//	limits 0 0                             ScanOptions.MaxEntries, MaxDepth
//	configlimit 0                          ScanOptions.MaxConfigEntries, only when set
//	base "/home/me/repo"                   Surface.Repo
//	item "path" "kind" "sum" "link" "watch" "danger"…
//	skip "path" "reason"
const journalMagic = "agentbox audit journal 1"

func encodeJournal(j *auditJournal) []byte {
	var b bytes.Buffer
	line := func(key string, fields ...string) {
		b.WriteString(key)
		for _, f := range fields {
			b.WriteByte(' ')
			b.WriteString(f)
		}
		b.WriteByte('\n')
	}
	q := strconv.Quote
	line(journalMagic)
	line("repo", q(j.Repo))
	if j.For != "" {
		line("for", q(j.For))
	}
	line("pid", strconv.Itoa(j.PID))
	line("start", j.Start.UTC().Format(time.RFC3339Nano))
	line("id", q(j.ID))
	for _, c := range j.Options.HostConfigs {
		line("hostconfig", q(c))
	}
	for _, d := range j.Options.GitDirs {
		line("gitdir", q(d))
	}
	paths := make([]string, 0, len(j.IDs))
	for p := range j.IDs {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		id := j.IDs[p]
		line("ident", q(p), q(strconv.FormatUint(id.Dev, 10)), q(strconv.FormatUint(id.Ino, 10)), q(strconv.FormatInt(id.Birth, 10)))
	}
	line("home", q(j.Options.Home))
	line("limits", strconv.Itoa(j.Options.MaxEntries), strconv.Itoa(j.Options.MaxDepth))
	if j.Options.MaxConfigEntries != 0 {
		line("configlimit", strconv.Itoa(j.Options.MaxConfigEntries))
	}
	if j.Base != nil {
		line("base", q(j.Base.Repo))
		for _, it := range j.Base.Items {
			f := []string{q(it.Path), q(string(it.Kind)), q(it.Sum), q(it.Link), q(it.Watch)}
			for _, d := range it.Dangers {
				f = append(f, q(d))
			}
			line("item", f...)
		}
		for _, s := range j.Base.Skipped {
			line("skip", q(s.Path), q(s.Reason))
		}
	}
	return b.Bytes()
}

func decodeJournal(data []byte) (*auditJournal, error) {
	return decodeJournalFrom(bytes.NewReader(data), false)
}

// decodeJournalFrom decodes the journal r holds; headerOnly stops before the
// baseline (Base nil): what another session's launch needs to know of it, which
// the baseline's size does not change.
func decodeJournalFrom(r io.Reader, headerOnly bool) (*auditJournal, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, maxJournalSize)
	if !sc.Scan() || sc.Text() != journalMagic {
		return nil, errors.New("not an audit journal")
	}
	j := &auditJournal{}
	for n := 2; sc.Scan(); n++ {
		key, rest, _ := strings.Cut(sc.Text(), " ")
		if headerOnly && key == "base" {
			break
		}
		f, quoted, err := journalFields(rest)
		if err == nil && quoted != (key != "pid" && key != "start" && key != "limits" && key != "configlimit") {
			err = fmt.Errorf("%q: strings are quoted, numbers and times are not", key)
		}
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		if err := j.set(key, f); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return j, nil
}

// set takes one line's fields: quoted strings unquoted, anything else as written.
func (j *auditJournal) set(key string, f []string) error {
	want := map[string]int{"repo": 1, "for": 1, "pid": 1, "start": 1, "id": 1, "hostconfig": 1, "gitdir": 1,
		"home": 1, "limits": 2, "configlimit": 1, "base": 1, "skip": 2, "ident": 4}[key]
	if key == "item" {
		want = max(len(f), 5)
	}
	if want == 0 || len(f) != want {
		return fmt.Errorf("%q with %d fields", key, len(f))
	}
	var err error
	switch key {
	case "repo":
		j.Repo = f[0]
	case "for":
		j.For = f[0]
	case "pid":
		j.PID, err = strconv.Atoi(f[0])
	case "start":
		j.Start, err = time.Parse(time.RFC3339Nano, f[0])
	case "id":
		j.ID = f[0]
	case "hostconfig":
		j.Options.HostConfigs = append(j.Options.HostConfigs, f[0])
	case "gitdir":
		j.Options.GitDirs = append(j.Options.GitDirs, f[0])
	case "ident":
		var id audit.DirID
		if id.Dev, err = strconv.ParseUint(f[1], 10, 64); err == nil {
			if id.Ino, err = strconv.ParseUint(f[2], 10, 64); err == nil {
				id.Birth, err = strconv.ParseInt(f[3], 10, 64)
			}
		}
		if j.IDs == nil {
			j.IDs = map[string]audit.DirID{}
		}
		j.IDs[f[0]] = id
	case "home":
		j.Options.Home = f[0]
	case "limits":
		if j.Options.MaxEntries, err = strconv.Atoi(f[0]); err == nil {
			j.Options.MaxDepth, err = strconv.Atoi(f[1])
		}
	case "configlimit":
		j.Options.MaxConfigEntries, err = strconv.Atoi(f[0])
	case "base":
		j.Base = &audit.Surface{Repo: f[0], Items: map[string]*audit.Item{}}
	case "item", "skip":
		if j.Base == nil {
			return fmt.Errorf("%q before the baseline", key)
		}
		if key == "skip" {
			j.Base.Skipped = append(j.Base.Skipped, audit.Skip{Path: f[0], Reason: f[1]})
			break
		}
		it := &audit.Item{Path: f[0], Kind: audit.ItemKind(f[1]), Sum: f[2], Link: f[3], Watch: f[4]}
		if len(f) > 5 {
			it.Dangers = f[5:]
		}
		j.Base.Items[it.Path] = it
	}
	return err
}

// journalFields splits a line's rest into its fields: quoted strings (unquoted) or
// bare words; quoted says which, for all of them (a line mixing the two is an error).
func journalFields(s string) (out []string, quoted bool, err error) {
	quoted = len(s) > 0 && s[0] == '"'
	for s != "" {
		if (s[0] == '"') != quoted {
			return nil, false, fmt.Errorf("field %d: quoted and bare fields mixed", len(out)+1)
		}
		if quoted {
			qs, err := strconv.QuotedPrefix(s)
			if err != nil {
				return nil, false, err
			}
			v, err := strconv.Unquote(qs)
			if err != nil {
				return nil, false, err
			}
			out = append(out, v)
			s = s[len(qs):]
		} else {
			w, rest, _ := strings.Cut(s, " ")
			out = append(out, w)
			s = " " + rest
			if rest == "" {
				s = ""
			}
		}
		if s == "" {
			break
		}
		if s[0] != ' ' {
			return nil, false, fmt.Errorf("no space after field %d", len(out))
		}
		s = s[1:]
	}
	return out, quoted, nil
}
