package policy

import (
	"strconv"
	"strings"
	"testing"
)

func TestParsePortMap(t *testing.T) {
	for in, want := range map[string]PortMap{"5432": {5432, 5432}, "8080:18080": {8080, 18080}, "1:65535": {1, 65535}, "00080": {80, 80}} {
		if got, err := ParsePortMap(in); err != nil || got != want {
			t.Errorf("ParsePortMap(%q) = %v %v, want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "0", "65536", "99999", "1:0", "-1", "+80", "80:", ":80", "80:90:100", "0x50", "８０", "80 ", "123456", "1e3"} {
		if m, err := ParsePortMap(bad); err == nil {
			t.Errorf("ParsePortMap(%q) = %v, want an error", bad, m)
		}
	}
}

// Forwardings need the sandbox's own network namespace, and no port is taken twice.
func TestResolvePorts(t *testing.T) {
	for _, c := range []struct {
		p      Policy
		hp, pb []string
		want   string // "" accepted
	}{
		{Policy{Offline: true}, []string{"5432", "6379:16379"}, []string{"8080"}, ""},
		{Policy{AllowNet: []string{"a.test"}}, []string{"5432"}, nil, ""},
		{Policy{}, []string{"5432"}, nil, "--host-port: without --offline or --allow-net"},
		{Policy{}, nil, []string{"8080"}, "--publish: without --offline or --allow-net"},
		{Policy{AllowNet: []string{"a.test"}}, []string{"3128:80"}, nil, "proxy"},
		{Policy{AllowNet: []string{"a.test"}}, nil, []string{"3128:80"}, "proxy"},
		{Policy{Offline: true}, []string{"3128:80"}, nil, ""},
		{Policy{Offline: true}, []string{"5432", "5432:5432"}, nil, "twice"},
		{Policy{Offline: true}, []string{"5432", "5432:1"}, nil, "inside is taken"},
		{Policy{Offline: true}, []string{"5432"}, []string{"5432:1"}, "inside is taken"},
		{Policy{Offline: true}, nil, []string{"1:9", "2:9"}, "host port 9"},
		{Policy{Offline: true}, nil, []string{"1:9", "1:10"}, ""},
	} {
		p := c.p
		err := resolvePorts(&p, Options{HostPort: c.hp, Publish: c.pb})
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v %v %v: refused: %v", c.p, c.hp, c.pb, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v %v %v: want an error with %q, got %v", c.p, c.hp, c.pb, c.want, err)
		case c.want == "" && len(p.HostPorts) != len(c.hp):
			t.Errorf("%v: HostPorts %v", c.hp, p.HostPorts)
		}
	}
}

// TestResolvePortsBounded: more forwardings than one frame of the init carries are
// refused, instead of losing the listeners that do not fit.
func TestResolvePortsBounded(t *testing.T) {
	var many []string
	for i := 0; i <= MaxForwards; i++ {
		many = append(many, strconv.Itoa(10000+i))
	}
	p := &Policy{Offline: true}
	err := resolvePorts(p, Options{HostPort: many})
	if err == nil || !strings.Contains(err.Error(), "at most") {
		t.Fatalf("%d --host-port: %v, want refused", len(many), err)
	}
	if err := resolvePorts(&Policy{Offline: true}, Options{HostPort: many[:MaxForwards]}); err != nil {
		t.Fatalf("%d --host-port: %v", MaxForwards, err)
	}
}
