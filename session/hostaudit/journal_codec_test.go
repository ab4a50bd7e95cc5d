package hostaudit

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/gitguard/audit"
)

// Every field of a journal comes back as it was written, bytes that are not UTF-8
// included (a JSON journal could not hold them).
func TestJournalRoundTrip(t *testing.T) {
	j := &auditJournal{
		Repo: "/home/me/r\xffepo \"q\"", For: "/home/me/main", PID: 4242, Start: time.Date(2026, 11, 30, 6, 17, 20, 123456789, time.UTC),
		ID: "20261130-061720-abc",
		Options: audit.ScanOptions{HostConfigs: []string{"/etc/gitconfig", "/home/me/.gitconfig"},
			GitDirs: []string{"/x/.git/worktrees/w"}, Home: "/home/me", MaxEntries: 7, MaxDepth: 9, MaxConfigEntries: 11},
		Base: &audit.Surface{Repo: "/home/me/r\xffepo \"q\"",
			Items: map[string]*audit.Item{
				"/a b/.git/config": {Path: "/a b/.git/config", Kind: audit.KindConfig, Sum: "f 0644 abc",
					Dangers: []string{"core.fsmonitor = x", "line\nbreak"}, Watch: "w"},
				"/a/.git/hooks/l": {Path: "/a/.git/hooks/l", Kind: audit.KindHook, Sum: "l", Link: "../../x"},
			},
			Skipped: []audit.Skip{{Path: "/a/.git/modules", Reason: "permission denied"}}},
		IDs: map[string]audit.DirID{"/home/me/r\xffepo \"q\"": {Dev: 2049, Ino: 1 << 40, Birth: 1764483440123456789},
			"/x/.git/worktrees/w": {Dev: 1, Ino: 2}},
	}
	got, err := decodeJournal(encodeJournal(j))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, j) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, j)
	}
	// The codec names every field: one added to these types must be added to it.
	// (Not journaled: ScanOptions.Walk and WalkHint and Surface.Walk, one scan's
	// request for its walk, its size hint, and the walk, which the recorder takes
	// from the live scan only; ScanOptions.Watch and Since and Surface.Launch,
	// taken, refreshed and shared, the launch watch the end scan of the same
	// process uses, its counts, and whether it took the launch walk whole; ScanOptions.
	// SkipKernelMounts, which only agentbox audit sets; GitDirsOnly, which only the
	// audit of a killed launcher's journal sets, for itself; ScanOptions.Held,
	// HeldGitDirs, WidenJournal and moves, Surface.Now, Removed and
	// MovedGitDirs, and Surface.configsHandled, one scan's count, one process's descriptors and where it found them; Surface.place and Skip.Blind and stuck, which only
	// the end scan's own Compare and quarantine read.)
	for typ, n := range map[reflect.Type]int{
		reflect.TypeOf(auditJournal{}): 8, reflect.TypeOf(audit.ScanOptions{}): 6 + 10,
		reflect.TypeOf(audit.Surface{}): 3 + 10, reflect.TypeOf(audit.Item{}): 6, reflect.TypeOf(audit.Skip{}): 2 + 2,
	} {
		if typ.NumField() != n {
			t.Errorf("%s has %d fields, the journal codec knows %d: teach encodeJournal and set", typ, typ.NumField(), n)
		}
	}
}

// A damaged journal is an error, never a baseline with holes in it.
func TestJournalDecodeRefuses(t *testing.T) {
	good := string(encodeJournal(&auditJournal{Repo: "/r", Base: &audit.Surface{Repo: "/r", Items: map[string]*audit.Item{}}}))
	for name, data := range map[string]string{
		"empty":          "",
		"json":           `{"repo":"/r"}`,
		"unknown key":    good + "surprise \"x\"\n",
		"unquoted":       good + "repo /r\n",
		"short item":     good + `item "/p" "hook"` + "\n",
		"item too early": strings.Replace(good, "base", "item \"/p\" \"k\" \"s\" \"l\" \"w\"\nbase", 1),
		"bad pid":        strings.Replace(good, "pid 0", "pid x", 1),
		"bad quote":      good + `skip "/p" "reason` + "\n",
	} {
		if _, err := decodeJournal([]byte(data)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func FuzzDecodeJournal(f *testing.F) {
	f.Add(encodeJournal(&auditJournal{Repo: "/r", Base: &audit.Surface{Repo: "/r", Items: map[string]*audit.Item{
		"/r/.git/config": {Path: "/r/.git/config", Kind: audit.KindConfig, Dangers: []string{"d"}}}}}))
	f.Fuzz(func(t *testing.T, data []byte) {
		j, err := decodeJournal(data)
		if err != nil {
			return
		}
		// What decodes re-encodes to something that decodes the same.
		again, err := decodeJournal(encodeJournal(j))
		if err != nil || !reflect.DeepEqual(again.Base, j.Base) || again.Repo != j.Repo {
			t.Fatalf("re-encoding changed the journal: %v", err)
		}
	})
}
