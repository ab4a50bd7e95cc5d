package sshagent

import (
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/netproxy"
)

func mustRules(t testing.TB, specs ...string) netproxy.Rules {
	t.Helper()
	rs, err := netproxy.ParseAll(specs)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func hashed(host string) string {
	salt := []byte("0123456789abcdefghij")
	m := hmac.New(sha1.New, salt)
	m.Write([]byte(host))
	return "|1|" + base64.StdEncoding.EncodeToString(salt) + "|" + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

func TestKnownHostsAllowedHost(t *testing.T) {
	_, f := startFake(t)
	k1, k2 := f.ids[0].Blob, f.ids[1].Blob
	line := func(hosts string, blob []byte) string {
		return hosts + " ssh-ed25519 " + base64.StdEncoding.EncodeToString(blob) + "\n"
	}
	kh := ParseKnownHosts(strings.NewReader(
		line("github.com,140.82.112.3", k1) +
			line(hashed("[127.0.0.1]:2222"), k2) +
			line("*", k2) + // a wildcard never allows
			"@cert-authority * ssh-ed25519 " + base64.StdEncoding.EncodeToString(k2) + "\n" +
			"garbage line\n"))
	cases := []struct {
		key   []byte
		rules []string
		want  string
	}{
		{k1, []string{"github.com"}, "github.com"},
		{k1, []string{"@github"}, "github.com"},
		{k1, []string{"gitlab.com"}, ""},
		{k1, []string{"github.com:443"}, ""},
		{k1, []string{"*.github.com"}, ""},
		{k2, []string{"127.0.0.1:2222"}, "[127.0.0.1]:2222"},
		{k2, []string{"127.0.0.1:2223"}, ""},
		{k2, []string{"github.com"}, ""},
	}
	for _, c := range cases {
		if got := kh.AllowedHost(c.key, mustRules(t, c.rules...)); got != c.want {
			t.Errorf("AllowedHost(%s, %v) = %q, want %q", Fingerprint(c.key), c.rules, got, c.want)
		}
	}
	revoked := ParseKnownHosts(strings.NewReader(line("github.com", k1) + "@revoked " + line("other", k1)))
	if got := revoked.AllowedHost(k1, mustRules(t, "github.com")); got != "" {
		t.Errorf("revoked key allowed for %q", got)
	}
	neg := ParseKnownHosts(strings.NewReader(line("github.com,!github.com", k1)))
	if got := neg.AllowedHost(k1, mustRules(t, "github.com")); got != "" {
		t.Errorf("negated host allowed: %q", got)
	}
}
