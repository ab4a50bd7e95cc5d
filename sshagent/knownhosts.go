package sshagent

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"io"
	"net/netip"
	"path"
	"strconv"
	"strings"

	"github.com/agentbox/agentbox/netproxy"
)

// knownHost is one line of a known_hosts file (sshd(8), SSH_KNOWN_HOSTS FILE
// FORMAT) with a plain host key: its host patterns and key blob.
type knownHost struct {
	patterns []string
	key      []byte
	revoked  bool
}

// KnownHosts are the host keys the user's ssh trusts, by host: the only sound way
// to go from the host key a session-bind carries to a host name, since the
// extension carries no name.
type KnownHosts struct {
	lines []knownHost
}

// maxKnownHosts bounds what is read of one known_hosts file.
const maxKnownHosts = 16 << 20

// ParseKnownHosts reads known_hosts lines from r (nil: none); lines it cannot
// parse and @cert-authority lines (whose keys sign host certificates, not
// sessions) are skipped.
func ParseKnownHosts(r io.Reader) *KnownHosts {
	kh := &KnownHosts{}
	if r != nil {
		kh.Add(r)
	}
	return kh
}

// Add reads more known_hosts lines from r.
func (kh *KnownHosts) Add(r io.Reader) {
	sc := bufio.NewScanner(io.LimitReader(r, maxKnownHosts))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		var line knownHost
		switch f[0] {
		case "@revoked":
			line.revoked = true
			f = f[1:]
		case "@cert-authority":
			continue
		}
		if len(f) < 3 {
			continue
		}
		blob, err := base64.StdEncoding.DecodeString(f[2])
		if err != nil || keyType(blob) != f[1] {
			continue
		}
		line.patterns, line.key = strings.Split(f[0], ","), blob
		kh.lines = append(kh.lines, line)
	}
}

// Revoked reports whether a @revoked line lists key.
func (kh *KnownHosts) Revoked(key []byte) bool {
	for _, l := range kh.lines {
		if l.revoked && bytes.Equal(l.key, key) {
			return true
		}
	}
	return false
}

// Names are the plain host names (as "host" or "[host]:port") that known_hosts
// gives key, for the record; hashed and wildcard ones cannot be named.
func (kh *KnownHosts) Names(key []byte) []string {
	var out []string
	for _, l := range kh.lines {
		if l.revoked || !bytes.Equal(l.key, key) {
			continue
		}
		for _, p := range l.patterns {
			if !strings.HasPrefix(p, "|") && !strings.HasPrefix(p, "!") && !strings.ContainsAny(p, "*?") {
				out = append(out, p)
			}
		}
	}
	return out
}

// AllowedHost returns a host that known_hosts gives key and rules allow ("" when
// none). Plain names are checked against every rule; a hashed name can only be
// tried against the rules' own literal hosts (at their port, 22 for a rule of
// every port); wildcard patterns never allow, a negated one that matches excludes
// its line, and a revoked key is refused whatever else lists it.
func (kh *KnownHosts) AllowedHost(key []byte, rules netproxy.Rules) string {
	if kh == nil || kh.Revoked(key) {
		return ""
	}
	for _, l := range kh.lines {
		if l.revoked || !bytes.Equal(l.key, key) {
			continue
		}
		for _, p := range l.patterns {
			switch {
			case strings.HasPrefix(p, "!"), strings.ContainsAny(p, "*?"):
			case strings.HasPrefix(p, "|1|"):
				for _, c := range candidates(rules) {
					if hashMatches(p, c) && !negated(l.patterns, c) {
						return c
					}
				}
			default:
				if allows(rules, p) && !negated(l.patterns, p) {
					return p
				}
			}
		}
	}
	return ""
}

// splitKnownHost splits a known_hosts host ("host" or "[host]:port").
func splitKnownHost(p string) (string, uint16, bool) {
	if !strings.HasPrefix(p, "[") {
		return p, 22, true
	}
	i := strings.Index(p, "]:")
	if i < 0 {
		return "", 0, false
	}
	port, err := strconv.ParseUint(p[i+2:], 10, 16)
	if err != nil || port == 0 {
		return "", 0, false
	}
	return p[1:i], uint16(port), true
}

func allows(rules netproxy.Rules, p string) bool {
	host, port, ok := splitKnownHost(p)
	if !ok {
		return false
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return rules.MatchAddr(a, port)
	}
	name, err := netproxy.CanonicalName(host)
	if err != nil {
		return false
	}
	ok, _ = rules.MatchName(name, port)
	return ok
}

// candidates are the known_hosts spellings of the rules' literal hosts.
func candidates(rules netproxy.Rules) []string {
	var out []string
	for _, r := range rules {
		var host string
		switch {
		case r.Name != "" && !r.Wildcard:
			host = r.Name
		case r.Name == "" && r.Prefix.IsSingleIP():
			host = r.Prefix.Addr().String()
		default:
			continue
		}
		if r.Port == 0 || r.Port == 22 {
			out = append(out, host)
		} else {
			out = append(out, "["+host+"]:"+strconv.Itoa(int(r.Port)))
		}
	}
	return out
}

// hashMatches checks a hashed known_hosts name ("|1|SALT|HASH",
// HMAC-SHA1 keyed with the salt) against host.
func hashMatches(pattern, host string) bool {
	parts := strings.Split(pattern, "|")
	if len(parts) != 4 {
		return false
	}
	salt, err1 := base64.StdEncoding.DecodeString(parts[2])
	want, err2 := base64.StdEncoding.DecodeString(parts[3])
	if err1 != nil || err2 != nil {
		return false
	}
	m := hmac.New(sha1.New, salt)
	m.Write([]byte(host))
	return hmac.Equal(m.Sum(nil), want)
}

// negated reports whether a "!pattern" of the line matches host.
func negated(patterns []string, host string) bool {
	for _, p := range patterns {
		if neg, ok := strings.CutPrefix(p, "!"); ok {
			if m, err := path.Match(neg, host); err == nil && m || neg == host {
				return true
			}
		}
	}
	return false
}
