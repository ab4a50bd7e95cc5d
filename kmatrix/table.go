package kmatrix

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// shortNames label the feature columns of the table.
var shortNames = map[string]string{
	"userns":             "userns",
	"overlay_userns":     "ovl",
	"pidns_proc":         "proc",
	"cgroupns":           "cgns",
	"new_mount_api":      "newmnt",
	"openat2":            "oat2",
	"mount_setattr":      "setattr",
	"tmpfs_user_xattr":   "tmpfsx",
	"overlay_opaque_dir": "opaque",
	"cgroup2":            "cg2",
	"fanotify_fid":       "fanfid",
}

// WriteTable prints the combined table: one line per cell with the features doctor
// measured (+ present, - missing), doctor's verdict, the test counts and the
// outcome; then every failed test with its reason, and each failed cell's problems.
func WriteTable(w io.Writer, m Matrix) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	names := featureNames(m.Results)
	head := []string{"cell", "kernel"}
	for _, n := range names {
		s := shortNames[n]
		if s == "" {
			s = n
		}
		head = append(head, s)
	}
	head = append(head, "doctor", "pass", "fail", "skip", "secs", "result")
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, r := range m.Results {
		row := []string{r.Cell, orDash(r.Release)}
		have := map[string]string{}
		for _, f := range r.Features {
			have[f.Name] = map[bool]string{true: "+", false: "-"}[f.OK]
		}
		for _, n := range names {
			row = append(row, orDash(have[n]))
		}
		doctor := "-"
		switch {
		case r.DoctorExit >= 0 && r.NativeReady:
			doctor = "ready"
		case r.DoctorExit >= 0:
			doctor = "refuses"
		}
		var pass, fail, skip int
		for _, t := range r.Tests {
			switch t.Status {
			case "pass":
				pass++
			case "fail":
				fail++
			case "skip":
				skip++
			}
		}
		result := "PASS"
		if !r.Pass {
			result = "FAIL"
		}
		row = append(row, doctor, fmt.Sprint(pass), fmt.Sprint(fail), fmt.Sprint(skip), fmt.Sprintf("%.1f", r.Seconds), result)
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range m.Results {
		for _, t := range sortedRows(r.Tests) {
			if t.Status == "fail" {
				fmt.Fprintf(w, "\n%s: %s %s FAILED\n    %s\n", r.Cell, t.Binary, t.Name, strings.ReplaceAll(t.Reason, "\n", "\n    "))
			}
		}
		if !r.Pass {
			fmt.Fprintf(w, "\n%s: %s\n", r.Cell, strings.Join(r.Problems, "\n    "))
		}
	}
	_, err := fmt.Fprintf(w, "\n%s\n", m.Summary)
	return err
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
