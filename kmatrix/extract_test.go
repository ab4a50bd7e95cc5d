package kmatrix

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// fakeModule compiles an ELF object with a .modinfo section, which is all
// extractKernel reads of a module.
func fakeModule(t *testing.T, dir, name, depends string) string {
	t.Helper()
	src := filepath.Join(dir, name+".c")
	code := `const char modinfo[] __attribute__((section(".modinfo"))) = "license=GPL\0depends=` + depends + `\0vermagic=1.0.0-test SMP";` + "\n"
	if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, name+".ko")
	if b, err := exec.Command("gcc", "-c", "-o", out, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, b)
	}
	return out
}

// TestExtractKernelFollowsDependencies builds two .debs shaped like Debian's split
// kernel packages (vmlinuz in one, modules in the other, one xz-compressed) and
// checks that overlay comes out uncompressed, after the module it depends on.
func TestExtractKernelFollowsDependencies(t *testing.T) {
	for _, tool := range []string{"gcc", "dpkg-deb", "xz"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Skip(t, "needs %s (scripts/setup-test-env.sh installs it)", tool)
		}
	}
	work := t.TempDir()
	build := func(pkg string, files map[string]string) string {
		root := filepath.Join(work, pkg)
		if err := os.MkdirAll(filepath.Join(root, "DEBIAN"), 0o755); err != nil {
			t.Fatal(err)
		}
		control := "Package: " + pkg + "\nVersion: 1.0\nArchitecture: amd64\nMaintainer: t <t@example.invalid>\nDescription: test\n"
		if err := os.WriteFile(filepath.Join(root, "DEBIAN/control"), []byte(control), 0o644); err != nil {
			t.Fatal(err)
		}
		for dst, src := range files {
			p := filepath.Join(root, dst)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		deb := filepath.Join(work, pkg+".deb")
		if b, err := exec.Command("dpkg-deb", "--root-owner-group", "-b", root, deb).CombinedOutput(); err != nil {
			t.Fatalf("dpkg-deb -b: %v\n%s", err, b)
		}
		return deb
	}
	mods := t.TempDir()
	overlay := fakeModule(t, mods, "overlay", "dep-one")
	dep := fakeModule(t, mods, "dep_one", "")
	if b, err := exec.Command("xz", "-k", overlay).CombinedOutput(); err != nil {
		t.Fatalf("xz: %v\n%s", err, b)
	}
	vmlinuz := filepath.Join(mods, "vmlinuz")
	if err := os.WriteFile(vmlinuz, []byte("not really a kernel"), 0o644); err != nil {
		t.Fatal(err)
	}
	binary := build("linux-binary-test", map[string]string{"usr/lib/modules/1.0.0-test/vmlinuz": vmlinuz})
	modules := build("linux-modules-test", map[string]string{
		"usr/lib/modules/1.0.0-test/kernel/fs/overlayfs/overlay.ko.xz": overlay + ".xz",
		"usr/lib/modules/1.0.0-test/kernel/lib/dep-one.ko":             dep,
	})

	out := filepath.Join(work, "out")
	kf, err := extractKernel(context.Background(), []string{binary, modules}, out, []string{"overlay"})
	if err != nil {
		t.Fatal(err)
	}
	if kf.Release != "1.0.0-test" {
		t.Errorf("release %q", kf.Release)
	}
	if b, _ := os.ReadFile(kf.Vmlinuz); string(b) != "not really a kernel" {
		t.Errorf("vmlinuz content %q", b)
	}
	if len(kf.Modules) != 2 || kf.Modules[0].Name != "dep_one" || kf.Modules[1].Name != "overlay" || kf.Modules[1].Compression != "xz" {
		t.Fatalf("modules %+v, want dep_one then overlay (xz)", kf.Modules)
	}
	want, _ := os.ReadFile(overlay)
	if got, _ := os.ReadFile(kf.Modules[1].Path); string(got) != string(want) {
		t.Error("overlay.ko not decompressed to the original")
	}
	// A second call reuses the extraction.
	if err := os.Remove(binary); err != nil {
		t.Fatal(err)
	}
	if _, err := extractKernel(context.Background(), []string{binary, modules}, out, []string{"overlay"}); err != nil {
		t.Errorf("cached extraction not reused: %v", err)
	}
}
