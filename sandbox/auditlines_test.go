package sandbox

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/termsafe"
)

// plantHostileNames makes, in the repository $1, a nested repository whose config
// names a filter by a subsection holding an OSC 52 clipboard write, an 8-bit CSI
// (U+009B) and a right-to-left override, and whose hook's file name holds an escape
// sequence and a newline followed by a line made to look like agentbox's own; the
// hook and the filter run ./tool. Each is a finding of the audit.
const plantHostileNames = `cd "$1" && git init -q sub &&
printf '[filter "x\033]52;c;cHduZWQ=\007\302\233\342\200\256"]\n\tclean = ./tool\n' > sub/.git/config &&
h=$(printf 'sub/.git/hooks/pre-commit\033]52;c;cHduZWQ=\007\nagentbox: audit: FORGED') &&
printf '#!/bin/sh\n./tool\n' > "$h" && chmod +x "$h" &&
printf '#!/bin/sh\n' > sub/tool && chmod +x sub/tool`

// TestAuditFindingsCarryNoTerminalControl: the audit's findings reach a Go API
// caller (Result.AuditFindings, "one line each") and its Log with no rune a terminal
// acts on and no line break, whatever the session named. On main the config's
// subsection reached Result.AuditFindings with its ESC, U+009B and U+202E as they
// were, and the hook's name put a line of its own making into the Log.
func TestAuditFindingsCarryNoTerminalControl(t *testing.T) {
	if !asTestUser(t) {
		return
	}
	for name, run := range launchers(t) {
		t.Run(name, func(t *testing.T) {
			repo := newRepo(t)
			var log strings.Builder
			res, err := run(Options{Command: []string{"/bin/sh", "-c", plantHostileNames, "sh", repo}, Repo: repo, Dir: repo, NoRecord: true, NoGitSave: true, Log: &log})
			if err != nil || res.Status != 0 {
				t.Fatalf("session: status %d, %v\n%s", res.Status, err, log.String())
			}
			if len(res.AuditFindings) < 3 {
				t.Fatalf("want the config, the hook and the program reported, got %q", res.AuditFindings)
			}
			for _, f := range res.AuditFindings {
				if !termsafe.Safe(f) {
					t.Errorf("Result.AuditFindings holds what a terminal acts on: %q", f)
				}
			}
			for _, l := range strings.Split(log.String(), "\n") {
				if strings.HasPrefix(l, "agentbox: audit: FORGED") || !termsafe.Safe(l) {
					t.Errorf("a line of the Log made by the session: %q\n%s", l, log.String())
				}
			}
		})
	}
}

// TestRunErrorCarriesNoTerminalControl: an error of Run names what an earlier
// session chose — here the snapshot of the Git metadata fails on a file that session
// left unreadable in .git/modules, under a name holding an OSC 52 clipboard write, a
// right-to-left override and a newline — and reaches the caller, who prints it, with
// no rune a terminal acts on and on one line, as agentbox's own error line is (its
// fail). On main the bytes were in err.Error() as they were.
func TestRunErrorCarriesNoTerminalControl(t *testing.T) {
	if !asTestUser(t) {
		return
	}
	for name, run := range launchers(t) {
		t.Run(name, func(t *testing.T) {
			repo := newRepo(t)
			plant := `cd "$1" && d=$(printf '.git/modules/x\033]52;c;cHduZWQ=\007\342\200\256\nagentbox: FORGED') && mkdir -p "$d" && echo '[core]' > "$d/config" && chmod 000 "$d/config"`
			var log strings.Builder
			res, err := run(Options{Command: []string{"/bin/sh", "-c", plant, "sh", repo}, Repo: repo, Dir: repo, NoRecord: true, NoGitSave: true, Log: &log})
			if err != nil || res.Status != 0 {
				t.Fatalf("planting session: status %d, %v\n%s", res.Status, err, log.String())
			}
			_, err = run(Options{Command: []string{"true"}, Repo: repo, Dir: repo, NoRecord: true, Log: &log})
			if err == nil {
				t.Fatalf("the snapshot of an unreadable config did not fail the launch (the test cannot fail)\n%s", log.String())
			}
			if !strings.Contains(err.Error(), "FORGED") {
				t.Fatalf("the error does not name the planted file (the test cannot fail): %v", err)
			}
			if !termsafe.Safe(err.Error()) {
				t.Errorf("Run's error holds what a terminal acts on: %q", err.Error())
			}
		})
	}
}

// TestOneLineErrorKeepsItsChain: an escaped error still answers errors.Is and
// errors.As for what it wraps, and a safe one is returned as it is.
func TestOneLineErrorKeepsItsChain(t *testing.T) {
	se := &SetupError{Step: "mount", Reason: "x"}
	err := oneLineError(fmt.Errorf("open /r/a\x1b]52;c;eA==\a\nb: %w", se))
	var got *SetupError
	if !errors.As(err, &got) || got != se || !termsafe.Safe(err.Error()) {
		t.Errorf("escaped error %q: errors.As found %v", err, got)
	}
	plain := errors.New("plain")
	if oneLineError(plain) != plain {
		t.Error("a safe error was wrapped")
	}
}
