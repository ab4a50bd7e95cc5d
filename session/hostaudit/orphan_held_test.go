package hostaudit

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/policy"
)

// TestOrphanAuditChecksIdentity: a killed launcher's audit, run by the next
// launch, reads the repository only if what lies at its path is the directory
// that session wrote. One moved away, or replaced by another (a fresh clone
// whose own config runs a program), is not audited by path: the wrong
// directory's files are never taken for plants and moved aside, and a line says
// what happened and what to do.
func TestOrphanAuditChecksIdentity(t *testing.T) {
	for _, row := range []struct{ name, want string }{
		{"same", "audited now: 1 finding(s)"},
		{"moved away", "cannot be opened now"},
		{"replaced", "is another directory now"},
	} {
		t.Run(row.name, func(t *testing.T) {
			top, err := filepath.EvalSymlinks(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			repo := filepath.Join(top, "repo")
			if err := os.MkdirAll(filepath.Join(repo, ".git/hooks"), 0o755); err != nil {
				t.Fatal(err)
			}
			p := &policy.Policy{Repo: repo, StateDir: filepath.Join(top, "state")}
			var stderr bytes.Buffer
			cfg := &Config{Stderr: &stderr, NoRecord: true}
			a, err := Start(cfg, p, nil)
			if err != nil {
				t.Fatal(err)
			}
			// The launcher is killed: its lock and descriptors go, its journal stays.
			a.journal.Close()
			a.held.Close()
			config := filepath.Join(repo, ".git/config")
			switch row.name {
			case "same":
				writeTestFile(t, config, "[core]\n\tfsmonitor = touch /tmp/pwned\n")
			case "moved away", "replaced":
				if err := os.Rename(repo, repo+".moved"); err != nil {
					t.Fatal(err)
				}
			}
			if row.name == "replaced" {
				if err := os.MkdirAll(filepath.Join(repo, ".git"), 0o755); err != nil {
					t.Fatal(err)
				}
				writeTestFile(t, config, "[core]\n\tfsmonitor = the-users-own-monitor\n")
			}
			Orphans(cfg, p)
			if !strings.Contains(stderr.String(), row.want) {
				t.Errorf("want %q in:\n%s", row.want, stderr.String())
			}
			if _, err := os.Stat(a.journalPath); !os.IsNotExist(err) {
				t.Errorf("the pending audit stayed (%v): the next launch would say it again and inherit its baseline", err)
			}
			if row.name == "replaced" {
				if b, err := os.ReadFile(config); err != nil || !strings.Contains(string(b), "the-users-own-monitor") {
					t.Errorf("the new directory's own config was moved aside (%v):\n%s", err, stderr.String())
				}
			}
		})
	}
}

func writeTestFile(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}
