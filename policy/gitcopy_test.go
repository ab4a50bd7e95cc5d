package policy

import (
	"errors"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/gitguard/gitconfig"
)

// TestGitConfigCopy: the entries a CI checkout leaves with a token are left out of
// the copy (an extraheader, an insteadOf whose subsection is the token) or lose
// the URL's user part (a remote URL), every other entry stays as it was, each line
// names file, line and key and never the value, and a file that does not parse is
// shown empty.
func TestGitConfigCopy(t *testing.T) {
	remote := "ghs_" + strings.Repeat("R", 36)
	instead := "ghp_" + strings.Repeat("I", 36)
	text := "[core]\n\trepositoryformatversion = 1\n[extensions]\n\tobjectformat = sha256\n" +
		"[http \"https://github.com/\"]\n\textraheader = AUTHORIZATION: basic eC1hY2Nlc3MtdG9rZW46c2VjcmV0c2VjcmV0c2VjcmV0\n" +
		"[remote \"origin\"]\n\turl = https://x-access-token:" + remote + "@github.com/o/r.git\n\tpushurl = https://" + remote + "@github.com/o/r.git\n" +
		"[remote \"plain\"]\n\turl = https://github.com/o/plain.git\n" +
		"[url \"https://" + instead + "@github.com/\"]\n\tinsteadOf = https://github.com/\n"
	entries, err := gitconfig.Parse(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	keep, notes, changed := GitConfigCopy("/r/.git/config", entries, nil)
	if !changed {
		t.Fatal("no credential found")
	}
	got := gitconfig.Format("copy", keep)
	for _, secret := range []string{remote, instead, "eC1hY2Nlc3M"} {
		if strings.Contains(got, secret) || strings.Contains(strings.Join(notes, "\n"), secret) {
			t.Errorf("%s kept:\n%s\n%s", secret, got, strings.Join(notes, "\n"))
		}
	}
	var names []string
	for _, e := range keep {
		names = append(names, e.Name()+"="+e.Value)
	}
	want := "core.repositoryformatversion=1 extensions.objectformat=sha256 remote.origin.url=https://github.com/o/r.git " +
		"remote.origin.pushurl=https://github.com/o/r.git remote.plain.url=https://github.com/o/plain.git"
	if strings.Join(names, " ") != want {
		t.Errorf("kept %s\nwant %s", strings.Join(names, " "), want)
	}
	wantNotes := []string{
		"--hide-secrets: /r/.git/config is a copy inside: line 6 (http.<…>.extraheader) holds a credential, left out",
		"--hide-secrets: /r/.git/config is a copy inside: line 8 (remote.<…>.url) holds a credential in its URL, left out of it",
		"--hide-secrets: /r/.git/config is a copy inside: line 9 (remote.<…>.pushurl) holds a credential in its URL, left out of it",
		"--hide-secrets: /r/.git/config is a copy inside: line 13 (url.<…>.insteadof) holds a credential, left out",
	}
	if strings.Join(notes, "\n") != strings.Join(wantNotes, "\n") {
		t.Errorf("notes:\n%s\nwant:\n%s", strings.Join(notes, "\n"), strings.Join(wantNotes, "\n"))
	}
	// The copy parses back to what was kept.
	again, err := gitconfig.Parse(strings.NewReader(got))
	if err != nil || len(again) != len(keep) {
		t.Errorf("the copy does not parse back (%v):\n%s", err, got)
	}

	if _, _, changed := GitConfigCopy("/r/.git/config", entries[:2], nil); changed {
		t.Error("a config without a credential gets a copy")
	}
	keep, notes, changed = GitConfigCopy("/r/.git/config", nil, errors.New("bad config line 3"))
	if !changed || len(keep) != 0 || len(notes) != 1 || !strings.Contains(notes[0], "is empty inside: it could not be read as a Git config (bad config line 3)") {
		t.Errorf("an unparsable config: %v %q %v", keep, notes, changed)
	}
}
