package policy

import (
	"strconv"
	"strings"

	"github.com/agentbox/agentbox/gitguard/gitconfig"
)

// --hide-secrets and the repository's own Git configs: a CI checkout leaves a
// token in .git/config (actions/checkout's http.<url>.extraheader, a
// remote.origin.url with user:token@, a url.<base>.insteadOf naming the token).
// The file cannot be hidden whole (Git inside needs core.*, extensions.*, the
// remotes), so the session is shown a copy without those entries, bound over it
// in the place of the read-only bind it already gets (build.Plan, Protected.Copy).

// GitConfigCopy is what the session sees of one of the repository's Git config
// files under --hide-secrets: entries are the file's, parsed (nil with parseErr
// set when it could not be). It returns the entries the copy keeps and one line
// for the launch per entry left out or changed, naming file, line and key, never
// the value; changed is false when the file holds no credential (no copy needed).
//
// A URL whose user part holds the credential (remote.<name>.url, pushurl, a
// submodule's url) keeps its place without the user part, so that `git remote -v`
// and fetches of a public remote work inside; any other credential entry (an
// extraheader, an insteadOf whose subsection is the token) is left out. A file
// that does not parse as Git config is shown empty (changed, one line): what it
// holds cannot be told apart, and Git refuses it anyway.
func GitConfigCopy(path string, entries []gitconfig.Entry, parseErr error) (keep []gitconfig.Entry, notes []string, changed bool) {
	prefix := "--hide-secrets: " + quote(path) + " "
	if parseErr != nil {
		return nil, []string{prefix + "is empty inside: it could not be read as a Git config (" + parseErr.Error() + "), so its credentials cannot be told from its settings"}, true
	}
	for _, e := range entries {
		if !gitEntryCredential(e) {
			keep = append(keep, e)
			continue
		}
		changed = true
		where := "line " + strconv.Itoa(e.Line) + " (" + gitEntryName(e) + ")"
		if v, ok := stripURLUserinfo(e.Value); ok {
			s := e
			s.Value = v
			if !gitEntryCredential(s) {
				keep = append(keep, s)
				notes = append(notes, prefix+"is a copy inside: "+where+" holds a credential in its URL, left out of it")
				continue
			}
		}
		notes = append(notes, prefix+"is a copy inside: "+where+" holds a credential, left out")
	}
	return keep, notes, changed
}

// gitEntryName is an entry's dotted name with a subsection elided (a subsection
// may be the credential: url."https://TOKEN@host/".insteadof).
func gitEntryName(e gitconfig.Entry) string {
	if e.Subsection != "" {
		return e.Section + ".<…>." + e.Key
	}
	return e.Section + "." + e.Key
}

// stripURLUserinfo removes the user part (user:password@, token@) of every URL in
// v; ok is false when there was none.
func stripURLUserinfo(v string) (string, bool) {
	var b strings.Builder
	ok := false
	rest := v
	for {
		i := strings.Index(rest, "://")
		if i < 0 {
			break
		}
		b.WriteString(rest[:i+3])
		rest = rest[i+3:]
		end := strings.IndexAny(rest, "/?# \t\n,;")
		if end < 0 {
			end = len(rest)
		}
		if at := strings.LastIndexByte(rest[:end], '@'); at >= 0 {
			rest = rest[at+1:]
			ok = true
		}
	}
	b.WriteString(rest)
	return b.String(), ok
}

// urlUserSecret says whether a URL in v carries a credential as its user part
// alone (https://TOKEN@host/, as CI systems write a token into a remote or an
// insteadOf): a user that is itself a token's shape.
func urlUserSecret(v string) bool {
	for rest := v; ; {
		i := strings.Index(rest, "://")
		if i < 0 {
			return false
		}
		rest = rest[i+3:]
		authority := rest
		if j := strings.IndexAny(authority, "/?# \t\n,;"); j >= 0 {
			authority = authority[:j]
		}
		if at := strings.LastIndexByte(authority, '@'); at >= 0 {
			user, _, _ := strings.Cut(authority[:at], ":")
			if IsSecretValue(user) {
				return true
			}
		}
	}
}
