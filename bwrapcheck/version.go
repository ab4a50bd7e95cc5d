// Package bwrapcheck decides whether a bubblewrap binary may run agentbox's sandbox.
// It finds the binary (AGENTBOX_BWRAP, else PATH), opens it once, runs nothing but
// "--version" of the opened file with a bounded wait, and refuses:
//
//   - releases older than 0.12.0, which have GHSA-pxhw-h44j-8pfx (a symlink
//     traversal during sandbox setup: files or directories created while setting up
//     could follow parent symlinks out of the sandbox);
//   - setuid or setgid binaries (agentbox runs bwrap unprivileged, in a user
//     namespace; a setuid bwrap turns any setup bug into a privilege escalation);
//   - a binary someone else could replace: the file, a directory on its way or a
//     link on its way owned by another user than root or the launching one, or
//     writable by group or others (a sticky directory's entries excepted);
//   - a missing binary, a --version that fails or hangs, output it cannot parse.
//
// The refusal happens before any sandbox argument reaches the binary. An accepted
// binary is held open (Binary.File): the launch executes that file, never its path
// again. Version parsing is pure and lives here; opening and running the binary live
// in check.go and open_linux.go. Use this package only to gate bwrap: it says nothing
// about whether the kernel can run the sandbox.
package bwrapcheck

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Advisory is the security advisory that makes releases before Minimum unsafe.
const Advisory = "GHSA-pxhw-h44j-8pfx"

// Minimum is the oldest bubblewrap release agentbox accepts: the first without
// Advisory.
var Minimum = Version{Major: 0, Minor: 12, Patch: 0}

// Version is a bubblewrap release as "bwrap --version" reports it.
type Version struct {
	Major, Minor, Patch int
	// Suffix is whatever followed X.Y.Z in the version word: a pre-release tag
	// ("-rc1", "~beta2") or a distribution's revision ("-1ubuntu2", "+deb13u1").
	Suffix string
}

// maxComponent bounds each numeric component, so parsing never overflows and a
// version compares the same on every platform.
const maxComponent = 999999999

// ParseVersion parses the output of "bwrap --version". Its first line must be
// "bubblewrap X.Y.Z[SUFFIX]", optionally followed by more words (some distributions
// add their package version); later lines are ignored.
func ParseVersion(output string) (Version, error) {
	line, _, _ := strings.Cut(output, "\n")
	fields := strings.Fields(line)
	if len(fields) < 2 || fields[0] != "bubblewrap" {
		return Version{}, errors.New(`want "bubblewrap X.Y.Z" on the first line`)
	}
	return parseVersionWord(fields[1])
}

// parseVersionWord parses "X.Y.Z" with an optional leading "v" and an optional
// suffix that starts with something other than a digit or a dot.
func parseVersionWord(word string) (Version, error) {
	rest := strings.TrimPrefix(word, "v")
	var nums [3]int
	for i := range nums {
		if i > 0 {
			if !strings.HasPrefix(rest, ".") {
				return Version{}, fmt.Errorf("version %q: want three numbers X.Y.Z", word)
			}
			rest = rest[1:]
		}
		n := 0
		for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
			n++
		}
		if n == 0 {
			return Version{}, fmt.Errorf("version %q: want three numbers X.Y.Z", word)
		}
		v, err := strconv.Atoi(rest[:n])
		if err != nil || v > maxComponent {
			return Version{}, fmt.Errorf("version %q: number %s out of range", word, rest[:n])
		}
		nums[i], rest = v, rest[n:]
	}
	if strings.HasPrefix(rest, ".") {
		return Version{}, fmt.Errorf("version %q: want three numbers X.Y.Z", word)
	}
	for _, r := range rest {
		// The suffix ends up in messages: keep it printable ASCII.
		if r <= ' ' || r >= 0x7f {
			return Version{}, fmt.Errorf("version %q: suffix has unprintable characters", word)
		}
	}
	return Version{Major: nums[0], Minor: nums[1], Patch: nums[2], Suffix: rest}, nil
}

func (v Version) String() string {
	return fmt.Sprintf("%d.%d.%d%s", v.Major, v.Minor, v.Patch, v.Suffix)
}

// Prerelease reports whether the suffix marks a release candidate or similar rather
// than a distribution's revision of a final release: "~…" (Debian's convention), or
// "-" followed by rc, alpha, beta, pre or dev.
func (v Version) Prerelease() bool {
	if strings.HasPrefix(v.Suffix, "~") {
		return true
	}
	tag, ok := strings.CutPrefix(strings.ToLower(v.Suffix), "-")
	if !ok {
		return false
	}
	for _, p := range []string{"rc", "alpha", "beta", "pre", "dev"} {
		if strings.HasPrefix(tag, p) {
			return true
		}
	}
	return false
}

// Compare orders v and w numerically by X.Y.Z; on a tie a pre-release comes before
// the release (0.12.0-rc1 < 0.12.0), and other suffixes compare equal. It returns -1,
// 0 or +1.
func (v Version) Compare(w Version) int {
	for _, d := range [...]int{v.Major - w.Major, v.Minor - w.Minor, v.Patch - w.Patch} {
		switch {
		case d < 0:
			return -1
		case d > 0:
			return 1
		}
	}
	switch vp, wp := v.Prerelease(), w.Prerelease(); {
	case vp && !wp:
		return -1
	case !vp && wp:
		return 1
	}
	return 0
}

// Supported reports whether v is at least Minimum.
func (v Version) Supported() bool {
	return v.Compare(Minimum) >= 0
}
