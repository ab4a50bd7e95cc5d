package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/cli"
	"github.com/agentbox/agentbox/internal/hostpath"
	"github.com/agentbox/agentbox/internal/termsafe"
	"github.com/agentbox/agentbox/shadow"
)

var logCommand = cli.Command{
	Name:    "log",
	Args:    "",
	Summary: "list recorded sessions (or results)",
	Help: `Lists the sessions recorded for the repository, newest first: id, start time,
backend, exit status, duration, files added/changed/removed, command; under a
session, its steps (checkpoints: ID@N, time, files changed since the step
before, message). With --results, lists the stored benchmark and kernel-matrix results instead.`,
	Flags: func() *flag.FlagSet { return new(logArgs).flags() },
}

var showCommand = cli.Command{
	Name:    "show",
	Args:    "[ID | ID@N]",
	Summary: "print a session's record",
	Help: `Prints the record of the session (or result) ID; a unique prefix of ID is enough.
Without ID, the last session of the repository. ID@N prints step N (checkpoint N)
of the session. --timings adds the launch's phases.`,
	Flags: func() *flag.FlagSet { return new(showArgs).flags() },
}

var diffCommand = cli.Command{
	Name:    "diff",
	Args:    "[ID | ID@N]",
	Summary: "what a session changed in the repository",
	Help: `Prints what session ID (default: the repository's last) changed in the repository,
from its recorded start state to its recorded end state, as a unified diff (binary
files named, not dumped). ID@N: what step N (checkpoint N) changed since step N-1.`,
	Flags: func() *flag.FlagSet { return new(diffArgs).flags() },
}

// stateDir is agentbox's state directory, by the rule policy.New applies for exec:
// ${XDG_STATE_HOME:-$HOME/.local/state}/agentbox.
func stateDir() (string, error) {
	if x := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(x) {
		return filepath.Join(x, "agentbox"), nil
	}
	if h := os.Getenv("HOME"); filepath.IsAbs(h) {
		return filepath.Join(h, ".local/state", "agentbox"), nil
	}
	return "", errors.New("no state directory: $XDG_STATE_HOME and $HOME are unset")
}

// repoFor resolves the repository as exec does: --repo, else the Git top level of
// the working directory, else the working directory; symlinks resolved.
func repoFor(flagRepo string) (string, error) {
	cwd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	cwd, err = filepath.EvalSymlinks(cwd)
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	if flagRepo == "" {
		return hostpath.GitTopLevel(cwd), nil
	}
	path := flagRepo
	if !filepath.IsAbs(path) {
		path = filepath.Join(cwd, path)
	}
	canon, err := filepath.EvalSymlinks(path)
	if err != nil {
		// A repository removed since its sessions were recorded can still be listed.
		return filepath.Clean(path), nil
	}
	return canon, nil
}

// logArgs holds what log's flags set.
type logArgs struct {
	repo                 string
	all, results, asJSON bool
	n                    int
	since                string
}

func (a *logArgs) flags() *flag.FlagSet {
	fs := flag.NewFlagSet("log", flag.ContinueOnError)
	fs.StringVar(&a.repo, "repo", "", "list the sessions of the repository `DIR` (default: as exec picks it)")
	fs.BoolVar(&a.all, "all", false, "list the sessions of every repository")
	fs.BoolVar(&a.results, "results", false, "list stored benchmark and kernel-matrix results")
	fs.IntVar(&a.n, "n", 0, "list at most `N` sessions, the newest")
	fs.StringVar(&a.since, "since", "", "list the sessions started after `WHEN`: a duration back from now (90m, 2h, 3d) or a date (2006-01-02, 2006-01-02T15:04)")
	fs.BoolVar(&a.asJSON, "json", false, "print the records as a JSON array")
	return fs
}

type showArgs struct{ asJSON, timings bool }

func (a *showArgs) flags() *flag.FlagSet {
	fs := flag.NewFlagSet("show", flag.ContinueOnError)
	fs.BoolVar(&a.asJSON, "json", false, "print the record as JSON")
	fs.BoolVar(&a.timings, "timings", false, "print the launch's internal timings (phases) too")
	return fs
}

type diffArgs struct{ stat bool }

func (a *diffArgs) flags() *flag.FlagSet {
	fs := flag.NewFlagSet("diff", flag.ContinueOnError)
	fs.BoolVar(&a.stat, "stat", false, "print a diffstat instead of the diff")
	return fs
}

func cmdLog(args []string) int {
	var a logArgs
	fset := a.flags()
	if st, done := parseFlags(fset, logCommand, args); done {
		return st
	}
	repoFlag, all, results := &a.repo, &a.all, &a.results
	if fset.NArg() > 0 {
		return fail("log: unexpected argument %q", fset.Arg(0))
	}
	state, err := stateDir()
	if err != nil {
		return fail("log: %v", err)
	}
	if *results {
		return listResults(state)
	}
	var stores []*shadow.Store
	if *all {
		if stores, err = shadow.All(state); err != nil {
			return fail("log: %v", err)
		}
	} else {
		repo, err := repoFor(*repoFlag)
		if err != nil {
			return fail("log: %v", err)
		}
		s, err := shadow.OpenExisting(state, repo)
		if errors.Is(err, fs.ErrNotExist) {
			fmt.Fprintf(os.Stderr, "agentbox: no sessions recorded for %s (agentbox log --all lists every repository's)\n", oneLine(repo))
			return 0
		}
		if err != nil {
			return fail("log: %v", err)
		}
		stores = append(stores, s)
	}
	var recs []shadow.Record
	for _, s := range stores {
		r, err := s.Sessions()
		if err != nil {
			return fail("log: %v", err)
		}
		recs = append(recs, r...)
	}
	sortNewestFirst(recs)
	if recs, err = filterSessions(recs, a.n, a.since, time.Now()); err != nil {
		return fail("log: %v", err)
	}
	if a.asJSON {
		if recs == nil {
			recs = []shadow.Record{}
		}
		out := termsafe.NewJSONWriter(os.Stdout) // names the sandbox chose
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(recs); err != nil {
			return fail("log: %v", err)
		}
		out.Flush()
		return 0
	}
	steps, err := sessionSteps(stores, recs) // steps.go
	if err != nil {
		return fail("log: %v", err)
	}
	printSessions(os.Stdout, recs, *all, steps)
	return 0
}

// filterSessions keeps, of recs sorted newest first, those started after since (a
// duration back from now or a date, local time) and then at most n of them (n > 0).
func filterSessions(recs []shadow.Record, n int, since string, now time.Time) ([]shadow.Record, error) {
	if n < 0 {
		return nil, fmt.Errorf("-n %d: want a positive count", n)
	}
	if since != "" {
		after, err := parseSince(since, now)
		if err != nil {
			return nil, err
		}
		kept := recs[:0:0]
		for _, r := range recs {
			if r.Start.After(after) {
				kept = append(kept, r)
			}
		}
		recs = kept
	}
	if n > 0 && len(recs) > n {
		recs = recs[:n]
	}
	return recs, nil
}

// parseSince reads --since: 90m, 2h, 3d (days), 1w (weeks), or a local date or time.
func parseSince(s string, now time.Time) (time.Time, error) {
	if num, ok := strings.CutSuffix(s, "d"); ok {
		if d, err := strconv.Atoi(num); err == nil && d >= 0 {
			return now.AddDate(0, 0, -d), nil
		}
	}
	if num, ok := strings.CutSuffix(s, "w"); ok {
		if w, err := strconv.Atoi(num); err == nil && w >= 0 {
			return now.AddDate(0, 0, -7*w), nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	for _, layout := range []string{"2006-01-02", "2006-01-02T15:04", "2006-01-02 15:04", "2006-01-02T15:04:05", "2006-01-02 15:04:05"} {
		if t, err := time.ParseInLocation(layout, s, time.Local); err == nil {
			return t, nil
		}
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("--since %q: want a duration (90m, 2h, 3d, 1w) or a date (2006-01-02, 2006-01-02T15:04)", s)
}

func sortNewestFirst(recs []shadow.Record) {
	slices.SortStableFunc(recs, func(a, b shadow.Record) int { return b.Start.Compare(a.Start) })
}

func printSessions(w io.Writer, recs []shadow.Record, withRepo bool, steps map[string][]shadow.Step) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := "ID\tSTART\tBACKEND\tEXIT\tDURATION\tFILES\t"
	if withRepo {
		head += "REPO\t"
	}
	fmt.Fprintln(tw, head+"COMMAND")
	for _, r := range recs {
		exit, dur, files := unfinished(r), "-", "-"
		if r.Complete {
			exit = fmt.Sprint(r.ExitStatus)
			if r.Error != "" {
				exit += " (failed)"
			}
			dur = r.End.Sub(r.Start).Round(time.Millisecond).String()
			files = fmt.Sprintf("+%d ~%d -%d", r.Files.Added, r.Files.Changed, r.Files.Removed) + unrecordedSuffix(r)
		}
		line := fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t", r.ID, r.Start.Local().Format("2006-01-02 15:04:05"),
			orDash(r.Backend), exit, dur, files)
		if withRepo {
			line += oneLine(r.Repo) + "\t"
		}
		fmt.Fprintln(tw, line+oneLine(shellJoin(r.Command)))
		for _, st := range steps[r.ID] {
			fmt.Fprintln(tw, stepRow(st)+pick(withRepo, "\t", "")+oneLine(st.Message))
		}
	}
	tw.Flush()
}

func listResults(state string) int {
	res, err := shadow.Results(state)
	if err != nil {
		return fail("log: %v", err)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTIME\tKIND\tSIZE\tSUMMARY")
	for _, r := range res {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", r.ID, r.Time.Local().Format("2006-01-02 15:04:05"), oneLine(r.Kind), r.Size, oneLine(r.Summary))
	}
	tw.Flush()
	return 0
}

func cmdShow(args []string) int {
	var a showArgs
	fset := a.flags()
	if st, done := parseFlags(fset, showCommand, args); done {
		return st
	}
	asJSON := &a.asJSON
	if fset.NArg() > 1 {
		return fail("show: want one session id (see agentbox log)")
	}
	state, err := stateDir()
	if err != nil {
		return fail("show: %v", err)
	}
	id := fset.Arg(0)
	if strings.Contains(id, "@") {
		s, rec, n, err := findStep(state, id) // steps.go
		if err != nil {
			return fail("show: %v", err)
		}
		return showStep(os.Stdout, s, rec, n, *asJSON)
	}
	if id == "" {
		if id, err = lastSession(state); err != nil {
			return fail("show: %v", err)
		}
	}
	_, rec, err := shadow.Find(state, id)
	if errors.Is(err, shadow.ErrNotFound) {
		r, rerr := shadow.FindResult(state, id)
		if rerr == nil {
			if err := shadow.WriteResult(os.Stdout, state, r); err != nil {
				return fail("show: %v", err)
			}
			return 0
		}
		if !errors.Is(rerr, shadow.ErrNotFound) {
			err = rerr
		}
	}
	if err != nil {
		return fail("show: %v", err)
	}
	if *asJSON {
		b, err := shadow.MarshalRecord(rec)
		if err != nil {
			return fail("show: %v", err)
		}
		writeJSON(os.Stdout, b)
		return 0
	}
	printRecord(os.Stdout, rec, a.timings)
	return 0
}

// printRecord prints a session record for a person, one field a line.
func printRecord(w io.Writer, r shadow.Record, timings bool) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("session", r.ID)
	row("repo", oneLine(r.Repo))
	row("command", oneLine(shellJoin(r.Command)))
	row("arguments", oneLine(shellJoin(r.Args)))
	backend := orDash(r.Backend)
	if r.BackendVersion != "" {
		backend += " (" + r.BackendVersion + ")"
	}
	row("backend", backend)
	row("start", r.Start.Local().Format("2006-01-02 15:04:05.000 MST"))
	if !r.Complete {
		row("end", "never recorded: "+map[string]string{
			"running":    "the session is still running",
			"unfinished": "its launcher ended without recording the end (killed?)",
		}[unfinished(r)])
	} else {
		row("end", fmt.Sprintf("%s (%s)", r.End.Local().Format("2006-01-02 15:04:05.000 MST"), r.End.Sub(r.Start).Round(time.Millisecond)))
		row("exit status", fmt.Sprint(r.ExitStatus))
		if r.KilledLeft > 0 {
			row("killed", fmt.Sprintf("%d processes left running when the command ended", r.KilledLeft))
		}
		if r.Error != "" {
			row("error", oneLine(r.Error))
		}
		row("files", fmt.Sprintf("%d added, %d changed, %d removed", r.Files.Added, r.Files.Changed, r.Files.Removed)+unrecordedSuffix(r))
		printUnrecorded(row, r)
	}
	p := r.Policy
	row("policy", fmt.Sprintf("workdir=%s home=%s offline=%t disk-tmp=%t backend=%s",
		oneLine(p.Workdir), orDash(oneLine(p.Home)), p.Offline, p.DiskTmp, orDash(p.Backend)))
	if len(p.AllowNet) > 0 {
		row("allow-net", oneLine(strings.Join(p.AllowNet, " ")))
	}
	if l := limitsLine(p); l != "" {
		row("limits", l)
	}
	if r.Usage != nil {
		row("usage", oneLine(usageLine(*r.Usage)))
	}
	for _, failed := range []bool{false, true} {
		label := pick(failed, "net failed", "net refused")
		for _, n := range r.NetRefusals {
			if n.Failed == failed {
				row(label, oneLine(fmt.Sprintf("%s port %d: %s (%d×)", n.Host, n.Port, n.Reason, n.Count)))
				label = ""
			}
		}
	}
	if p.SSHAgent {
		row("ssh-agent", oneLine(orDash(strings.Join(p.SSHKeys, " "))+" (keys let through; -: every key)"))
	}
	for i, e := range r.SSHAgent {
		row(pick(i == 0, "ssh agent", ""), oneLine(sshAgentLine(e)))
	}
	printPorts(row, r)
	if timings && len(r.Phases) > 0 {
		var ph []string
		for _, x := range r.Phases {
			ph = append(ph, fmt.Sprintf("%s %s", x.Name, time.Duration(x.NS)))
		}
		row("phases", strings.Join(ph, ", "))
	}
	row("snapshot", orDash(oneLine(r.Snapshot)))
	for i, f := range r.AuditFindings {
		row(pick(i == 0, "audit", ""), oneLine(f))
	}
	for i, n := range r.Notes {
		row(pick(i == 0, "notes", ""), oneLine(n))
	}
	row("launcher", fmt.Sprintf("pid %d, uid %d, host %s", r.LauncherPID, r.UID, orDash(r.Host)))
	row("commits", fmt.Sprintf("start %s, end %s", orDash(r.StartCommit), orDash(r.EndCommit)))
	tw.Flush()
}

func cmdDiff(args []string) int {
	var a diffArgs
	fset := a.flags()
	if st, done := parseFlags(fset, diffCommand, args); done {
		return st
	}
	stat := &a.stat
	if fset.NArg() > 1 {
		return fail("diff: want one session id (see agentbox log)")
	}
	state, err := stateDir()
	if err != nil {
		return fail("diff: %v", err)
	}
	s, rec, step, err := findStep(state, fset.Arg(0)) // steps.go
	if err != nil {
		return fail("diff: %v", err)
	}
	for _, n := range rec.Notes {
		if strings.Contains(n, "not recorded") {
			fmt.Fprintf(os.Stderr, "agentbox: note: %s\n", oneLine(n))
		}
	}
	if rec.NotRecordedCount > 0 {
		fmt.Fprintf(os.Stderr, "agentbox: note: %d paths of the working tree are not in this record (agentbox show %s lists them)\n", rec.NotRecordedCount, rec.ID)
	}
	var w io.Writer = os.Stdout
	if isTerminal(os.Stdout) {
		// The diff's lines are whatever the agent wrote; on a terminal, escape
		// sequences in them could move the cursor and hide other lines from the
		// person reading the diff. Piped, the bytes pass unchanged (for patch).
		w = termsafe.NewWriter(os.Stdout)
	}
	if step >= 0 {
		err = s.DiffStep(w, rec, step, *stat)
	} else {
		err = s.Diff(w, rec, *stat)
	}
	if e, ok := w.(*termsafe.Writer); ok {
		e.Flush()
	}
	if err != nil {
		return fail("diff: %v", err)
	}
	return 0
}

// unfinished says what became of a session without an end state: "running" while its
// launcher (same host, same PID, still an agentbox) lives, else "unfinished". The
// launcher's name comes from /proc/PID/comm (the executable's base name): its
// /proc/PID/exe is closed to other processes, the launcher being non-dumpable while
// the raw init shares its memory (backend.Options.RawInit).
func unfinished(r shadow.Record) string {
	host, _ := os.Hostname()
	if r.LauncherPID > 0 && r.Host == host {
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", r.LauncherPID))
		if err == nil && strings.HasPrefix(string(comm), "agentbox") {
			return "running"
		}
	}
	return "unfinished"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func pick(c bool, a, b string) string {
	if c {
		return a
	}
	return b
}

// oneLine keeps a value from the record (which the sandboxed command chose: file
// names, arguments) on one line and free of terminal control sequences.
func oneLine(s string) string { return termsafe.String(s) }

// writeJSON writes the JSON document b to w as the same document with every rune a
// terminal acts on escaped (termsafe.NewJSONWriter): records and plans carry names
// a session chose, and --json output lands on terminals too.
func writeJSON(w io.Writer, b []byte) {
	out := termsafe.NewJSONWriter(w)
	out.Write(b)
	out.Flush()
}

// unrecordedSuffix says, after the file counts, how much of the working tree the
// record does not hold, so that "+0 ~0 -0" never stands for a change it missed.
func unrecordedSuffix(r shadow.Record) string {
	var parts []string
	if r.NotRecordedCount > 0 {
		parts = append(parts, fmt.Sprintf("%d not recorded", r.NotRecordedCount))
	}
	if r.IgnoredCount > 0 {
		parts = append(parts, fmt.Sprintf("%d ignored", r.IgnoredCount))
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// printUnrecorded lists what the record does not hold, each path quoted and made
// safe for the terminal (they are the sandbox's).
func printUnrecorded(row func(k, v string), r shadow.Record) {
	for i, u := range r.NotRecorded {
		row(pick(i == 0, "unrecorded", ""), termsafe.Quote(u.Path)+": "+oneLine(u.Reason))
	}
	if more := r.NotRecordedCount - len(r.NotRecorded); more > 0 {
		row(pick(len(r.NotRecorded) == 0, "unrecorded", ""), fmt.Sprintf("… and %d more", more))
	}
	for i, p := range r.Ignored {
		row(pick(i == 0, "ignored", ""), termsafe.Quote(p))
	}
	if more := r.IgnoredCount - len(r.Ignored); more > 0 {
		row(pick(len(r.Ignored) == 0, "ignored", ""), fmt.Sprintf("… and %d more", more))
	}
	if r.ReadBytes > 0 {
		row("read", fmt.Sprintf("%d bytes of file content at the end", r.ReadBytes))
	}
}

// shellJoin joins argv as a shell would read it back, quoting where needed.
func shellJoin(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && strings.Trim(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,@+%") == "" {
			q[i] = a
			continue
		}
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// sshAgentLine is one --ssh-agent event for show: time, request, key, host, verdict.
func sshAgentLine(e shadow.SSHAgentEvent) string {
	s := e.Time.Local().Format("15:04:05") + " " + e.Op
	if e.Key != "" {
		s += " " + e.Key
	}
	if e.Host != "" {
		s += " host " + e.Host
	}
	if e.Allowed {
		return s + ": allowed"
	}
	return s + ": refused, " + e.Reason
}
