package netproxy

import (
	"net/netip"
	"os"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		spec string
		want string // the rules' String, joined by " "; "" with bad
		bad  string // a substring of the error
	}{
		{spec: "example.com", want: "example.com"},
		{spec: "Example.COM.", want: "example.com"},
		{spec: "example.com:443", want: "example.com:443"},
		{spec: "*.example.com", want: "*.example.com"},
		{spec: "*.example.com:8443", want: "*.example.com:8443"},
		{spec: "1.2.3.4", want: "1.2.3.4"},
		{spec: "1.2.3.4:80", want: "1.2.3.4:80"},
		{spec: "10.0.0.0/8", want: "10.0.0.0/8"},
		{spec: "10.1.2.3/8:22", want: "10.0.0.0/8:22"},
		{spec: "::1", want: "::1"},
		{spec: "[::1]:8080", want: "[::1]:8080"},
		{spec: "[fd00::/8]:22", want: "[fd00::/8]:22"},
		{spec: "::ffff:127.0.0.1", want: "127.0.0.1"},
		{spec: "::ffff:10.0.0.0/104", want: "10.0.0.0/8"},
		{spec: "under_score.example", want: "under_score.example"},
		{spec: "@npm", want: "registry.npmjs.org registry.yarnpkg.com"},
		{spec: "", bad: "is empty"},
		{spec: "@nope", bad: "no such preset"},
		{spec: "example.com:0", bad: "port"},
		{spec: "example.com:65536", bad: "port"},
		{spec: "example.com:+1", bad: "port"},
		{spec: "example.com:http", bad: "port"},
		{spec: "*.com", bad: "top-level"},
		{spec: "*", bad: "host name"},
		{spec: "a.*.example.com", bad: "host name"},
		{spec: "*.1.2.3.4", bad: "wildcard"},
		{spec: "exa mple.com", bad: "host name"},
		{spec: "http://example.com", bad: "not a URL: --allow-net example.com"},
		{spec: "a.test,b.test", bad: "repeat the flag"},
		{spec: "example.com/path", bad: "address or prefix"},
		{spec: "1.2.3.4/33", bad: "address or prefix"},
		{spec: "[::1", bad: "']'"},
		{spec: "[::1]x", bad: "after"},
		{spec: "fe80::1%eth0", bad: "zone"},
		{spec: "a..b", bad: "host name"},
		{spec: strings.Repeat("a", 64) + ".com", bad: "63"},
		{spec: strings.Repeat("a.", 200), bad: "longer"},
	} {
		rules, err := Parse(c.spec)
		if c.bad != "" {
			if err == nil || !strings.Contains(err.Error(), c.bad) {
				t.Errorf("Parse(%q) = %v, %v; want an error with %q", c.spec, rules, err, c.bad)
			}
			continue
		}
		if err != nil {
			t.Errorf("Parse(%q): %v", c.spec, err)
			continue
		}
		var got []string
		for _, r := range rules {
			got = append(got, r.String())
		}
		if strings.Join(got, " ") != c.want {
			t.Errorf("Parse(%q) = %q, want %q", c.spec, strings.Join(got, " "), c.want)
		}
	}
}

// Every preset parses, and its rules print back as written.
func TestPresets(t *testing.T) {
	for name, hosts := range Presets() {
		rules, err := Parse("@" + name)
		if err != nil {
			t.Fatalf("@%s: %v", name, err)
		}
		for i, r := range rules {
			if r.String() != hosts[i] {
				t.Errorf("@%s: rule %d is %s, written %s", name, i, r, hosts[i])
			}
		}
	}
}

func mustRules(t testing.TB, specs ...string) Rules {
	t.Helper()
	r, err := ParseAll(specs)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestMatchName(t *testing.T) {
	rs := mustRules(t, "example.com", "*.dev.test", "git.test:22", "10.0.0.1")
	for _, c := range []struct {
		name         string
		port         uint16
		ok, isListed bool
	}{
		{"example.com", 443, true, true},
		{"example.com", 25, true, true},
		{"www.example.com", 443, false, false}, // a name rule is that name only
		{"badexample.com", 443, false, false},
		{"a.dev.test", 80, true, true},
		{"a.b.dev.test", 80, true, true},
		{"dev.test", 80, false, false}, // a wildcard is the subdomains, not the apex
		{"xdev.test", 80, false, false},
		{"git.test", 22, true, true},
		{"git.test", 443, false, true},
		{"10.0.0.1", 80, false, false}, // address rules never match a name
	} {
		ok, listed := rs.MatchName(c.name, c.port)
		if ok != c.ok || listed != c.isListed {
			t.Errorf("MatchName(%s, %d) = %t, %t; want %t, %t", c.name, c.port, ok, listed, c.ok, c.isListed)
		}
	}
}

func TestMatchAddr(t *testing.T) {
	rs := mustRules(t, "0.0.0.0/0", "::/0", "127.0.0.1:8080", "169.254.0.0/16:80", "fe80::/10")
	for _, c := range []struct {
		addr string
		port uint16
		ok   bool
	}{
		{"8.8.8.8", 53, true},
		{"10.1.2.3", 22, true}, // private ranges are the user's to list, and 0/0 lists them
		{"2001:db8::1", 443, true},
		{"127.0.0.1", 8080, true}, // listed within loopback
		{"127.0.0.1", 8081, false},
		{"127.0.0.2", 8080, false},
		{"::ffff:127.0.0.1", 8080, true},
		{"::ffff:127.0.0.1", 22, false},
		{"::1", 8080, false},          // ::/0 is no listing of loopback
		{"0.0.0.0", 80, false},        // nor 0/0 of the unspecified address
		{"169.254.169.254", 80, true}, // listed within link-local
		{"169.254.169.254", 443, false},
		{"224.0.0.1", 80, false},
		{"255.255.255.255", 80, false},
		{"fe80::1", 22, true},
		{"64:ff9b::7f00:1", 80, false},      // NAT64 of 127.0.0.1
		{"64:ff9b:1::a9fe:a9fe", 80, false}, // local-use NAT64 of 169.254.169.254
		{"2002:7f00:1::1", 80, false},       // 6to4 of 127.0.0.1
	} {
		if got := rs.MatchAddr(netip.MustParseAddr(c.addr), c.port); got != c.ok {
			t.Errorf("MatchAddr(%s, %d) = %t, want %t", c.addr, c.port, got, c.ok)
		}
	}
	if mustRules(t, "example.com").MatchAddr(netip.MustParseAddr("93.184.216.34"), 443) {
		t.Error("a name rule matched an address")
	}
}

// FuzzParse: any value either parses into rules that print and re-parse to
// themselves, or is refused on one line; never a panic.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"example.com", "*.a.b:1", "[::1]:2", "10.0.0.0/8:3", "@claude", "::ffff:1.2.3.4/120", "a:b:c", "[", "*.", "é.com"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		rules, err := Parse(spec)
		if err != nil {
			if strings.ContainsAny(err.Error(), "\n\r") {
				t.Fatalf("message on more than one line: %q", err)
			}
			return
		}
		if strings.HasPrefix(spec, "@") {
			return
		}
		again, err := Parse(rules[0].String())
		if err != nil || len(again) != 1 || again[0] != rules[0] {
			t.Fatalf("%q -> %s -> %v, %v", spec, rules[0], again, err)
		}
		// The rule matches what it names.
		r := rules[0]
		port := r.Port
		if port == 0 {
			port = 1
		}
		if r.Name != "" && !r.Wildcard {
			if ok, _ := Rules(rules).MatchName(r.Name, port); !ok {
				t.Fatalf("%s does not match its own name", r)
			}
		}
		if r.Name == "" {
			if sp, _ := Special(r.Prefix.Addr()); !sp && !Rules(rules).MatchAddr(r.Prefix.Addr(), port) {
				t.Fatalf("%s does not match its own address", r)
			}
		}
	})
}

// TestPresetsInTheDocs: the README and docs/network.md list every preset with exactly
// its hosts, on the preset's row of their tables, so what users read is what
// --allow-net @NAME allows.
func TestPresetsInTheDocs(t *testing.T) {
	for _, doc := range []string{"../README.md", "../docs/network.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		rows := map[string]string{} // preset name -> its row's hosts cell
		for _, line := range strings.Split(string(b), "\n") {
			cells := strings.Split(line, "|")
			if len(cells) < 4 || !strings.Contains(cells[1], "`@") {
				continue
			}
			for _, f := range strings.Split(cells[1], ",") {
				rows[strings.Trim(strings.TrimSpace(f), "`@")] = cells[2]
			}
		}
		for name, hosts := range Presets() {
			row, ok := rows[name]
			if !ok {
				t.Errorf("%s: no row for @%s", doc, name)
				continue
			}
			for _, h := range hosts {
				if !strings.Contains(row, h) {
					t.Errorf("%s: @%s's row lacks %s", doc, name, h)
				}
			}
		}
	}
}
