package policy

import (
	"path/filepath"
	"strconv"
	"strings"

	"github.com/agentbox/agentbox/gitguard/gitconfig"
)

// --hide-secrets and the operator's Git config: the credential files it names, and
// the config files that hold a credential themselves.

// gitCredentialFiles are the credential files the operator's Git config (the
// global and system files and what they include) names: the store of a
// credential.helper "store --file PATH", an http.cookieFile (Gerrit's and
// Google's cookies are logins) and an http.sslKey (a client certificate's key),
// for every URL subsection. The default places of the first two are in Secrets;
// these follow them where the config moves them.
func gitCredentialFiles(home string, env func(string) string) []string {
	var out []string
	eachHostGitConfig(home, env, func(_ string, _ int, entries []gitconfig.Entry) {
		for _, e := range entries {
			var path string
			switch {
			case e.Section == "http" && (e.Key == "cookiefile" || e.Key == "sslkey"):
				path = e.Value
			case e.Section == "credential" && e.Key == "helper":
				path = storeFile(e.Value)
			}
			if p, ok := gitconfig.ExpandPath(strings.TrimSpace(path), home); ok && filepath.IsAbs(p) {
				out = append(out, filepath.Clean(p))
			}
		}
	})
	return out
}

// eachHostGitConfig calls f with the entries of every Git config file the
// operator's Git reads in every repository: the global and system files and what
// they include, to Git's depth (0 for the first).
func eachHostGitConfig(home string, env func(string) string, f func(file string, depth int, entries []gitconfig.Entry)) {
	configs := gitconfig.HostConfigFiles(func(k string) string {
		if k == "HOME" {
			return home
		}
		return env(k)
	})
	seen := map[string]bool{}
	for depth := 0; len(configs) > 0 && depth <= gitconfig.MaxIncludeDepth; depth++ {
		var next []string
		for _, c := range configs {
			if seen[c] {
				continue
			}
			seen[c] = true
			entries, err := gitconfig.ReadHostFile(c)
			if err != nil {
				continue
			}
			next = append(next, gitconfig.IncludePaths(entries, c, home)...)
			f(c, depth, entries)
		}
		configs = next
	}
}

// gitConfigCredential is a Git config file that holds a credential itself, and
// where (its line and key, never the value).
type gitConfigCredential struct{ path, why string }

// gitConfigCredentials are the operator's Git config files (gitconfig.HostConfigFiles
// and their includes) that hold a credential in an entry: a token in the URL of
// url.<base>.insteadOf (`[url "https://x-access-token:TOKEN@github.com/"]`, the
// common way to let Git fetch private modules), an http.extraHeader with an
// Authorization header, a proxy URL with a password, a credential helper that
// prints one (`!echo password=…`), sendemail.smtpPass, imap.pass, a forge tool's
// token (github.token, hub.oauthtoken). The sandbox's HOME shows these files as
// they are, so --hide-secrets hides each whole: a config that is only that
// (an include) loses nothing else, and the line at launch says how to keep the
// rest of a global config inside.
func gitConfigCredentials(home string, env func(string) string) []gitConfigCredential {
	var out []gitConfigCredential
	eachHostGitConfig(home, env, func(file string, depth int, entries []gitconfig.Entry) {
		for _, e := range entries {
			if gitEntryCredential(e) {
				what := e.Section
				if e.Subsection != "" {
					what += ".<…>"
				}
				why := "line " + strconv.Itoa(e.Line) + " (" + what + "." + e.Key + ") holds a credential"
				if depth == 0 {
					why += "; to keep its other settings inside, move the credential to a file of its own that it includes (hidden alone) or to ~/.git-credentials"
				}
				out = append(out, gitConfigCredential{path: filepath.Clean(file), why: why})
				return
			}
		}
	})
	return out
}

// gitEntryCredential says whether a Git config entry holds a credential: a key
// that names one (…pass, …password, …token, …secret), or a value or URL
// subsection of the shapes IsSecretValue knows, or a URL whose user part alone is
// one (https://TOKEN@host/).
func gitEntryCredential(e gitconfig.Entry) bool {
	k := e.Key // lower case, as the parser gives it
	if !e.NoValue && e.Value != "" && (k == "pass" || k == "smtppass" || strings.HasSuffix(k, "password") ||
		strings.HasSuffix(k, "passwd") || strings.HasSuffix(k, "token") || strings.HasSuffix(k, "secret")) {
		return true
	}
	return IsSecretValue(e.Value) || urlUserSecret(e.Value) ||
		e.Subsection != "" && (IsSecretValue(e.Subsection) || urlUserSecret(e.Subsection))
}

// environGetter looks a name up in environ ("NAME=value" entries).
func environGetter(environ []string) func(string) string {
	return func(name string) string {
		for _, kv := range environ {
			if k, v, ok := strings.Cut(kv, "="); ok && k == name {
				return v
			}
		}
		return ""
	}
}

// storeFile is the --file of a credential helper that is git-credential-store
// ("store --file=PATH", "store --file PATH", or the program's path), "" for another.
func storeFile(helper string) string {
	words := strings.Fields(helper)
	if len(words) < 2 || words[0] != "store" && filepath.Base(words[0]) != "git-credential-store" {
		return ""
	}
	for i, w := range words[1:] {
		if v, ok := strings.CutPrefix(w, "--file="); ok {
			return v
		}
		if w == "--file" && i+2 < len(words) {
			return words[i+2]
		}
	}
	return ""
}

// HideNotices are the lines shown at launch for the files --hide-secrets hid for
// a credential they hold among other settings (a Git config): the sandbox sees
// the whole file empty, and the line says why and how to keep the rest inside.
func (p *Policy) HideNotices() []string {
	var out []string
	for _, h := range p.Hide {
		if h.Why != "" {
			out = append(out, "--hide-secrets: "+quote(h.Path)+" is empty inside: "+h.Why)
		}
	}
	return out
}
