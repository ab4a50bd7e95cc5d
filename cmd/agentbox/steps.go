package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/agentbox/agentbox/shadow"
)

// Steps (checkpoints) in log, show, diff and undo: SESSION@N names step N of a
// session, 0 its start (shadow/checkpoint.go).

// sessionSteps are the checkpoints of each of recs that has any, by session id.
func sessionSteps(stores []*shadow.Store, recs []shadow.Record) (map[string][]shadow.Step, error) {
	out := map[string][]shadow.Step{}
	for _, s := range stores {
		with, err := s.WithSteps()
		if err != nil {
			return nil, err
		}
		for _, r := range recs {
			if with[r.ID] && r.Repo == s.Repo {
				if out[r.ID], err = s.Steps(r); err != nil {
					return nil, err
				}
			}
		}
	}
	return out, nil
}

// stepRow is a step's line under its session in log's table.
func stepRow(st shadow.Step) string {
	return fmt.Sprintf("  @%d\t%s\tstep\t-\t-\t+%d ~%d -%d%s\t", st.N, st.Time.Local().Format("2006-01-02 15:04:05"),
		st.Files.Added, st.Files.Changed, st.Files.Removed, pick(st.NotRecordedCount > 0, fmt.Sprintf(" (%d not recorded)", st.NotRecordedCount), ""))
}

// showStep prints step n of rec.
func showStep(w io.Writer, s *shadow.Store, rec shadow.Record, n int, asJSON bool) int {
	_, st, err := s.AtStep(rec, n)
	if err != nil {
		return fail("show: %v", err)
	}
	if asJSON {
		b, err := json.MarshalIndent(st, "", "  ")
		if err != nil {
			return fail("show: %v", err)
		}
		writeJSON(w, append(b, '\n'))
		return 0
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("session", rec.ID)
	row("step", fmt.Sprintf("%d%s", n, pick(n == 0, " (the session's start)", "")))
	row("time", st.Time.Local().Format("2006-01-02 15:04:05.000 MST"))
	if n > 0 {
		row("message", orDash(oneLine(st.Message)))
		row("files", fmt.Sprintf("%d added, %d changed, %d removed since step %d", st.Files.Added, st.Files.Changed, st.Files.Removed, n-1))
		for i, u := range st.NotRecorded {
			row(pick(i == 0, "unrecorded", ""), oneLine(fmt.Sprintf("%q: %s", u.Path, u.Reason)))
		}
		if more := st.NotRecordedCount - len(st.NotRecorded); more > 0 {
			row("", fmt.Sprintf("… and %d more", more))
		}
		for i, note := range st.Notes {
			row(pick(i == 0, "notes", ""), oneLine(note))
		}
	}
	row("commit", orDash(st.Commit))
	tw.Flush()
	return 0
}

// findStep finds SESSION@N (N -1: no step given).
func findStep(state, arg string) (*shadow.Store, shadow.Record, int, error) {
	id, n, err := shadow.ParseStep(arg)
	if err != nil {
		return nil, shadow.Record{}, 0, err
	}
	if id == "" {
		if id, err = lastSession(state); err != nil {
			return nil, shadow.Record{}, 0, err
		}
	}
	s, rec, err := shadow.Find(state, id)
	return s, rec, n, err
}
