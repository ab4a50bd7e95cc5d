package hostaudit

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/policy"
)

// TestFindingLinesBounded: an audit prints at most MaxShownFindings finding lines
// and one line naming how many more there are and the file that lists them all;
// AuditFindings keeps at most MaxKeptFindings and that line. On main every line
// was printed and kept (3,000 planted hooks: 850 KB on the terminal and in the
// record).
func TestFindingLinesBounded(t *testing.T) {
	for _, n := range []int{MaxShownFindings, MaxShownFindings + 1, MaxKeptFindings + 7} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			state := t.TempDir()
			var stderr bytes.Buffer
			var o Outcome
			for i := range n {
				o.found(&stderr, fmt.Sprintf("f%d", i))
			}
			o.Close(&stderr, state, "ID")
			printed := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
			list := FindingsList(state, "ID")
			if n <= MaxShownFindings {
				if len(printed) != n || len(o.AuditFindings) != n {
					t.Errorf("%d findings: printed %d, kept %d", n, len(printed), len(o.AuditFindings))
				}
				if _, err := os.Lstat(list); err == nil {
					t.Error("a list written though every line was shown")
				}
				return
			}
			if len(printed) != MaxShownFindings+1 || !strings.Contains(printed[MaxShownFindings], fmt.Sprintf("and %d more finding(s), not shown: all %d are listed in %s", n-MaxShownFindings, n, list)) {
				t.Errorf("%d findings printed %d lines, the last %q", n, len(printed), printed[len(printed)-1])
			}
			b, err := os.ReadFile(list)
			if err != nil || strings.Count(string(b), "\n") != n || !strings.HasPrefix(string(b), "f0\nf1\n") {
				t.Errorf("the list: %v, %d lines", err, strings.Count(string(b), "\n"))
			}
			want := min(n, MaxKeptFindings)
			if n > MaxKeptFindings {
				want++
			}
			if len(o.AuditFindings) != want || (n > MaxKeptFindings && !strings.Contains(o.AuditFindings[want-1], list)) {
				t.Errorf("kept %d lines, want %d ending with the list's name", len(o.AuditFindings), want)
			}
		})
	}
}

// TestFindingLinesBoundedWithoutList: with no list to write (a state directory
// that is not absolute, a list already there) the rest are printed after all.
func TestFindingLinesBoundedWithoutList(t *testing.T) {
	state := t.TempDir()
	if err := os.MkdirAll(filepath.Dir(FindingsList(state, "ID")), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/null", FindingsList(state, "ID")); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"", state} {
		var stderr bytes.Buffer
		var o Outcome
		for i := range MaxShownFindings + 5 {
			o.found(&stderr, fmt.Sprintf("f%d", i))
		}
		o.Close(&stderr, dir, "ID")
		if !strings.Contains(stderr.String(), "agentbox: audit: f24\n") {
			t.Errorf("state %q: the findings not shown were not printed:\n%s", dir, stderr.String())
		}
	}
}

// TestOrphanAuditLinesBounded: the audit a killed launcher left prints its
// findings through the same bound, its list named by the journal's audit ID.
func TestOrphanAuditLinesBounded(t *testing.T) {
	repo, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p := &policy.Policy{Repo: repo, StateDir: t.TempDir()}
	if out, err := exec.Command("git", "init", "-q", repo).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	a, err := Start(&Config{Stderr: &bytes.Buffer{}, NoRecord: true}, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	const planted = MaxShownFindings + 10
	for i := range planted {
		hook := filepath.Join(repo, ".git/hooks", fmt.Sprintf("h%d", i))
		if err := os.WriteFile(hook, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	a.journal.Close() // the launcher dies
	a.held.Close()
	var stderr bytes.Buffer
	Orphans(&Config{Stderr: &stderr}, p)
	lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
	// The announcement, MaxShownFindings findings, the line naming the list.
	if len(lines) != MaxShownFindings+2 || !strings.Contains(lines[len(lines)-1], FindingsList(p.StateDir, a.id)) {
		t.Fatalf("%d planted hooks: %d lines:\n%s", planted, len(lines), stderr.String())
	}
	b, err := os.ReadFile(FindingsList(p.StateDir, a.id))
	if err != nil || strings.Count(string(b), "\n") < planted {
		t.Errorf("the list: %v, %d lines", err, strings.Count(string(b), "\n"))
	}
}
