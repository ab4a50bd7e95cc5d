package overlay

import (
	"fmt"
	"syscall"
	"testing"
)

func TestUpperFor(t *testing.T) {
	const me, myGroup = 1000, 1000
	tests := []struct {
		lower    Attr
		uid, gid int
		want     Upper
	}{
		{Attr{me, myGroup, 0o755}, me, myGroup, Upper{true, 0o755}},        // the caller's own HOME keeps owner and mode
		{Attr{me, myGroup, 0o700}, me, myGroup, Upper{true, 0o700}},        // also a private one
		{Attr{me, myGroup, 0o2750}, me, myGroup, Upper{true, 0o2750}},      // setgid directory bit kept
		{Attr{me, myGroup, 0o40755}, me, myGroup, Upper{true, 0o755}},      // st_mode's file type dropped
		{Attr{0, 0, 0o755}, me, myGroup, Upper{false, 0o555}},              // someone else's: the mounter gets others' rights
		{Attr{0, 0, 0o700}, me, myGroup, Upper{false, 0o000}},              //
		{Attr{me, 0, 0o751}, me, myGroup, Upper{false, 0o111}},             // group not the caller's: owner and group get others' bits
		{Attr{0, myGroup, 0o775}, me, myGroup, Upper{false, 0o555}},        // owner not the caller's
		{Attr{5, 5, 0o1777}, me, myGroup, Upper{false, 0o1777}},            // sticky kept
		{Attr{me, myGroup, 0o750}, 0, 0, Upper{false, 0o000}},              // root launching into a user's HOME
		{Attr{0, 0, 0o750}, 0, 0, Upper{true, 0o750}},                      // root's own HOME
		{Attr{65534, 65534, 0o755}, 65534, 65534, Upper{true, 0o755}},      // nobody is an id like any other
		{Attr{0xffffffff, 0xffffffff, 0o755}, -1, -1, Upper{false, 0o555}}, // no wrap-around between uint32 and int
	}
	for _, tt := range tests {
		if got := UpperFor(tt.lower, tt.uid, tt.gid); got != tt.want {
			t.Errorf("UpperFor(%+v, uid %d, gid %d) = %+v, want %+v", tt.lower, tt.uid, tt.gid, got, tt.want)
		}
	}
}

func TestOptions(t *testing.T) {
	tests := []struct {
		lowers      []string
		upper, work string
		want        string
	}{
		{[]string{"/proc/self/fd/7"}, "/proc/self/fd/8/upper", "/proc/self/fd/8/work",
			"lowerdir=/proc/self/fd/7,upperdir=/proc/self/fd/8/upper,workdir=/proc/self/fd/8/work,userxattr"},
		{[]string{"/s/lower", "/home/u"}, "/s/upper", "/s/work",
			"lowerdir=/s/lower:/home/u,upperdir=/s/upper,workdir=/s/work,userxattr"},
	}
	for _, tt := range tests {
		if got := Options(tt.lowers, tt.upper, tt.work); got != tt.want {
			t.Errorf("Options(%q, %q, %q) = %q, want %q", tt.lowers, tt.upper, tt.work, got, tt.want)
		}
	}
}

// wrapped stands in for an executor's mount error, which unwraps to the errno.
type wrapped struct{ err error }

func (w wrapped) Error() string { return "mount overlay: " + w.err.Error() }
func (w wrapped) Unwrap() error { return w.err }

func TestFallback(t *testing.T) {
	data := Options([]string{"/l"}, "/u", "/w")
	tests := []struct {
		data string
		err  error
		want string
		ok   bool
	}{
		{data, syscall.EINVAL, "lowerdir=/l,upperdir=/u,workdir=/w", true},          // Linux < 5.11: no userxattr
		{data, wrapped{syscall.EINVAL}, "lowerdir=/l,upperdir=/u,workdir=/w", true}, // through the executor's error
		{data, fmt.Errorf("x: %w", syscall.EINVAL), "lowerdir=/l,upperdir=/u,workdir=/w", true},
		{data, nil, "", false},                                            // it mounted
		{data, syscall.EPERM, "", false},                                  // no overlay in a user namespace at all: retrying cannot help
		{data, wrapped{syscall.ENOENT}, "", false},                        // not the kernel's version
		{"lowerdir=/l,upperdir=/u,workdir=/w", syscall.EINVAL, "", false}, // already without
	}
	for _, tt := range tests {
		got, ok := Fallback(tt.data, tt.err)
		if got != tt.want || ok != tt.ok {
			t.Errorf("Fallback(%q, %v) = %q, %v, want %q, %v", tt.data, tt.err, got, ok, tt.want, tt.ok)
		}
	}
}

func TestHint(t *testing.T) {
	for _, err := range []error{syscall.EINVAL, syscall.EPERM, wrapped{syscall.EPERM}} {
		if Hint(err) == "" {
			t.Errorf("Hint(%v) is empty: the user gets no advice on an old kernel", err)
		}
	}
	for _, err := range []error{nil, syscall.ENOENT, wrapped{syscall.EBUSY}} {
		if h := Hint(err); h != "" {
			t.Errorf("Hint(%v) = %q, want none", err, h)
		}
	}
}
