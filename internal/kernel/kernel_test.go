package kernel

import (
	"strings"
	"testing"
)

func TestAtLeast(t *testing.T) {
	for _, tc := range []struct {
		release, version string
		want, ok         bool
	}{
		{"5.10.0-32-amd64", "5.11", false, true},
		{"5.11.0", "5.11", true, true},
		{"6.1.0-50-amd64", "5.12", true, true},
		{"6.12.117+deb13-amd64", "6.6", true, true},
		{"7.2.13+deb14-amd64", "6.6", true, true},
		{"4.19.0", "4.6", true, true},
		{"6.5.0", "6.6", false, true},
		{"unknown", "5.2", false, false},
		{"6", "5.2", false, false},
	} {
		got, ok := AtLeast(tc.release, tc.version)
		if got != tc.want || ok != tc.ok {
			t.Errorf("AtLeast(%q, %q) = %v, %v; want %v, %v", tc.release, tc.version, got, ok, tc.want, tc.ok)
		}
	}
}

func TestRefusalNamesFirstRequiredFailure(t *testing.T) {
	r := Report{Checks: []Check{
		{Name: UserNS, OK: true},
		{Name: MountSetattr, OK: false, Detail: "ENOSYS"},
		{Name: OverlayUserNS, OK: false, Detail: "mount overlay: operation not permitted", Fix: "use Linux 5.11"},
	}}
	if r.NativeReady() {
		t.Fatal("NativeReady with a required check failed")
	}
	got := r.Refusal()
	for _, want := range []string{"overlayfs in a user namespace", "operation not permitted", "fix: use Linux 5.11", "agentbox doctor"} {
		if !strings.Contains(got, want) {
			t.Errorf("Refusal() = %q, missing %q", got, want)
		}
	}
	if strings.Contains(got, "mount_setattr") {
		t.Errorf("Refusal() = %q names a check that has a fallback", got)
	}
	r.Checks[2].OK = true
	if !r.NativeReady() || r.Refusal() != "" {
		t.Errorf("with only a fallback check failed: NativeReady %v, Refusal %q", r.NativeReady(), r.Refusal())
	}
}

func TestSpecsAreUniqueAndComplete(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range Specs {
		if seen[s.Name] {
			t.Errorf("check %q listed twice", s.Name)
		}
		seen[s.Name] = true
		if s.Title == "" || s.Since == "" || s.Need == "" {
			t.Errorf("check %q: incomplete spec %+v", s.Name, s)
		}
		if (s.Need == Fallback) != (s.Fallback != "") {
			t.Errorf("check %q: a fallback need must name the fallback, and only it: %+v", s.Name, s)
		}
	}
}
