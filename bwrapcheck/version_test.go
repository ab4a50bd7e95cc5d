package bwrapcheck

import (
	"strings"
	"testing"
)

func TestParseVersion(t *testing.T) {
	tests := []struct {
		out       string
		want      Version
		supported bool
	}{
		{"bubblewrap 0.12.0\n", Version{0, 12, 0, ""}, true},
		{"bubblewrap 0.8.0\n", Version{0, 8, 0, ""}, false},
		{"bubblewrap 0.11.2\n", Version{0, 11, 2, ""}, false},
		{"bubblewrap 0.13.1-rc1\n", Version{0, 13, 1, "-rc1"}, true},
		{"bubblewrap 1.0.0", Version{1, 0, 0, ""}, true},
		{"bubblewrap v0.12.1\n", Version{0, 12, 1, ""}, true},
		// Distribution strings: a revision suffix, or extra words after the version.
		{"bubblewrap 0.12.0-1ubuntu2\n", Version{0, 12, 0, "-1ubuntu2"}, true},
		{"bubblewrap 0.11.0 (Fedora 0.11.0-2.fc41)\n", Version{0, 11, 0, ""}, false},
		{"bubblewrap 0.12.0+deb13u1\nsecond line ignored\n", Version{0, 12, 0, "+deb13u1"}, true},
		{"  bubblewrap\t0.12.0  \r\n", Version{0, 12, 0, ""}, true},
		// Pre-releases of the minimum itself are older than it.
		{"bubblewrap 0.12.0-rc1\n", Version{0, 12, 0, "-rc1"}, false},
		{"bubblewrap 0.12.0~beta2\n", Version{0, 12, 0, "~beta2"}, false},
		// Numeric, not lexical, comparison.
		{"bubblewrap 0.9.9\n", Version{0, 9, 9, ""}, false},
		{"bubblewrap 0.100.0\n", Version{0, 100, 0, ""}, true},
		{"bubblewrap 0.012.0\n", Version{0, 12, 0, ""}, true},
	}
	for _, tt := range tests {
		got, err := ParseVersion(tt.out)
		if err != nil {
			t.Errorf("ParseVersion(%q): %v", tt.out, err)
			continue
		}
		if got != tt.want {
			t.Errorf("ParseVersion(%q) = %#v, want %#v", tt.out, got, tt.want)
		}
		if got.Supported() != tt.supported {
			t.Errorf("ParseVersion(%q) = %s: Supported() = %v, want %v", tt.out, got, got.Supported(), tt.supported)
		}
	}
}

func TestParseVersionRefuses(t *testing.T) {
	for _, out := range []string{
		"",
		"\n",
		"hello world\n",
		"bubblewrap\n",
		"bwrap 0.12.0\n",
		"Bubblewrap 0.12.0\n",
		"version: bubblewrap 0.12.0\n",
		"\nbubblewrap 0.12.0\n", // the version must be on the first line
		"bubblewrap 0.12\n",
		"bubblewrap 12\n",
		"bubblewrap 0.12.0.1\n",
		"bubblewrap 0..12\n",
		"bubblewrap .0.12.0\n",
		"bubblewrap x0.12.0\n",
		"bubblewrap 0.12.x\n",
		"bubblewrap -0.12.0\n",
		"bubblewrap 0.12.99999999999999999999\n",
		"bubblewrap 1000000000.0.0\n",
		"bubblewrap 0.12.0-\x01rc\n",
		"bubblewrap 0.12.0-r\u00e9\n",
	} {
		if v, err := ParseVersion(out); err == nil {
			t.Errorf("ParseVersion(%q) = %s, want an error", out, v)
		}
	}
}

func TestCompare(t *testing.T) {
	order := []string{"0.8.0", "0.11.2", "0.12.0~rc1", "0.12.0", "0.12.1", "0.13.1-rc1", "0.13.1", "1.0.0", "10.0.0"}
	vs := make([]Version, len(order))
	for i, s := range order {
		v, err := ParseVersion("bubblewrap " + s)
		if err != nil {
			t.Fatal(err)
		}
		vs[i] = v
	}
	for i := range vs {
		for j := range vs {
			want := 0
			if i < j {
				want = -1
			} else if i > j {
				want = 1
			}
			if got := vs[i].Compare(vs[j]); got != want {
				t.Errorf("%s.Compare(%s) = %d, want %d", vs[i], vs[j], got, want)
			}
		}
	}
	// Distribution revisions of one release compare equal; so do its pre-releases.
	for _, pair := range [][2]string{{"0.12.0-1", "0.12.0+deb13u1"}, {"0.12.0", "0.12.0-1"}, {"0.12.0~rc1", "0.12.0-rc2"}} {
		a, _ := ParseVersion("bubblewrap " + pair[0])
		b, _ := ParseVersion("bubblewrap " + pair[1])
		if a.Compare(b) != 0 || b.Compare(a) != 0 {
			t.Errorf("%s.Compare(%s) = %d, want 0", a, b, a.Compare(b))
		}
	}
}

// FuzzParseVersion checks that the parser never panics, that what it accepts prints
// back to itself, and that the verdict agrees with a comparison against Minimum.
// The seed corpus is in testdata/fuzz/FuzzParseVersion.
func FuzzParseVersion(f *testing.F) {
	f.Add("bubblewrap 0.12.0\n")
	f.Add("bubblewrap 0.8.0 (Debian 0.8.0-2+deb12u1)\n")
	f.Fuzz(func(t *testing.T, out string) {
		v, err := ParseVersion(out)
		if err != nil {
			return
		}
		if v.Major < 0 || v.Minor < 0 || v.Patch < 0 ||
			v.Major > maxComponent || v.Minor > maxComponent || v.Patch > maxComponent {
			t.Fatalf("ParseVersion(%q) = %#v: component out of range", out, v)
		}
		if strings.ContainsAny(v.Suffix, " \t\r\n") {
			t.Fatalf("ParseVersion(%q) = %#v: suffix with white space", out, v)
		}
		again, err := ParseVersion("bubblewrap " + v.String() + "\n")
		if err != nil || again != v {
			t.Fatalf("ParseVersion(%q) = %#v, but its String %q parses to %#v, %v", out, v, v.String(), again, err)
		}
		if v.Compare(v) != 0 || v.Compare(Minimum) != -Minimum.Compare(v) {
			t.Fatalf("%s: Compare is not antisymmetric", v)
		}
		// An independent statement of the rule: 0.12.0 or later, its pre-releases not.
		want := v.Major > 0 || v.Minor > 12 || (v.Minor == 12 && (v.Patch > 0 || !v.Prerelease()))
		if v.Supported() != want {
			t.Fatalf("%s: Supported() = %v, want %v", v, v.Supported(), want)
		}
	})
}
