package kernel

import (
	"os"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestMain hands the process to the probe child when Probe started it, as every
// program calling Probe must.
func TestMain(m *testing.M) {
	if IsChild() {
		os.Exit(ChildMain())
	}
	os.Exit(m.Run())
}

var probed *Report

func probe(t *testing.T) Report {
	t.Helper()
	if probed == nil {
		r := Probe(Options{})
		probed = &r
		t.Logf("kernel %s uid %d sysctls %v masked %v", r.Kernel, r.UID, r.Sysctls, r.MaskedProc)
		for _, c := range r.Checks {
			t.Logf("%-16s ok=%-5v %s", c.Name, c.OK, c.Detail)
		}
	}
	return *probed
}

// TestProbesMatchKernelVersion holds each measured feature against the release that
// introduced it. Run on every kernel of the matrix, this is what proves the probes:
// a feature must be found on kernels that have it and missing on kernels that don't.
func TestProbesMatchKernelVersion(t *testing.T) {
	r := probe(t)
	if _, ok := AtLeast(r.Kernel, "1.0"); !ok {
		t.Fatalf("cannot parse kernel release %q", r.Kernel)
	}
	userns, _ := r.Get(UserNS)
	for _, name := range []string{NewMountAPI, Openat2, MountSetattr, CgroupNS, OverlayUserNS, OverlayOpaqueDir, TmpfsUserXattr} {
		t.Run(name, func(t *testing.T) {
			s, _ := SpecOf(name)
			c, found := r.Get(name)
			if !found {
				t.Fatalf("no result for %s", name)
			}
			if name != Openat2 && !userns.OK {
				testenv.SkipKernel(t, UserNS, "user namespaces unavailable (%s): cannot measure %s", userns.Detail, name)
			}
			has, _ := AtLeast(r.Kernel, s.Since)
			if name == OverlayUserNS && r.Sysctls["overlay.permit_mounts_in_userns"] == "Y" {
				has = true // Debian's 5.10 with the module option
			}
			if c.OK != has {
				t.Errorf("%s on %s: measured ok=%v (%s), but the feature arrived in %s", name, r.Kernel, c.OK, c.Detail, s.Since)
			}
			if !c.OK && c.Detail == "" {
				t.Errorf("%s failed without saying why", name)
			}
		})
	}
}

func TestDetectSyscallsAgreesWithProbe(t *testing.T) {
	r := probe(t)
	sc := DetectSyscalls()
	if c, _ := r.Get(Openat2); c.OK != sc.Openat2 {
		t.Errorf("openat2: DetectSyscalls %v, probe %v (%s)", sc.Openat2, c.OK, c.Detail)
	}
	if c, _ := r.Get(UserNS); !c.OK {
		testenv.SkipKernel(t, UserNS, "user namespaces unavailable: %s", c.Detail)
	}
	if c, _ := r.Get(MountSetattr); c.OK != sc.MountSetattr {
		t.Errorf("mount_setattr: DetectSyscalls %v, probe %v (%s)", sc.MountSetattr, c.OK, c.Detail)
	}
	if c, _ := r.Get(NewMountAPI); c.OK != sc.NewMountAPI {
		t.Errorf("new mount API: DetectSyscalls %v, probe %v (%s)", sc.NewMountAPI, c.OK, c.Detail)
	}
}

// TestUserNSVerdictFollowsSysctl: where the sysctl switches unprivileged user
// namespaces off, the probe must fail and name the sysctl in its fix; where nothing
// forbids them, it must succeed.
func TestUserNSVerdictFollowsSysctl(t *testing.T) {
	r := probe(t)
	c, _ := r.Get(UserNS)
	off := r.Sysctls["kernel.unprivileged_userns_clone"] == "0" || r.Sysctls["user.max_user_namespaces"] == "0"
	switch {
	case off && r.UID != 0:
		if c.OK {
			t.Fatalf("user namespaces reported usable although switched off (%v)", r.Sysctls)
		}
		if !strings.Contains(c.Fix, "sysctl -w") {
			t.Errorf("fix %q does not say which sysctl to set", c.Fix)
		}
		if !strings.Contains(r.Refusal(), c.Fix) {
			t.Errorf("Refusal() %q does not carry the fix %q", r.Refusal(), c.Fix)
		}
	case !off && r.Sysctls["kernel.apparmor_restrict_unprivileged_userns"] != "1" && len(r.MaskedProc) == 0:
		if !c.OK {
			t.Fatalf("user namespaces refused with no sysctl, AppArmor or container to blame: %s", c.Detail)
		}
	default:
		testenv.Skip(t, "user namespaces restricted by policy here (%v, masked /proc %v); verdict %v: %s", r.Sysctls, r.MaskedProc, c.OK, c.Detail)
	}
}

func TestParseMaskedProc(t *testing.T) {
	const mountinfo = `22 1 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw
23 22 0:22 / /proc/sys/fs/binfmt_misc rw,relatime shared:13 - autofs systemd-1 rw
24 22 0:5 /null /proc/kcore ro,nosuid - devtmpfs udev rw
25 22 0:23 / /proc/acpi\040dir ro - tmpfs tmpfs ro
26 1 0:24 / /processes rw - tmpfs tmpfs rw
`
	got := parseMaskedProc(strings.NewReader(mountinfo))
	want := []string{"/proc/kcore", "/proc/acpi dir"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("parseMaskedProc = %q, want %q", got, want)
	}
}
