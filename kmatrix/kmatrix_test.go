package kmatrix

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testenv"
	"github.com/agentbox/agentbox/kmatrix/vmproto"
)

// readNewc parses a newc archive the way the kernel's init/initramfs.c does, so the
// writer is checked against the format rather than against itself.
func readNewc(t *testing.T, b []byte) map[string]string {
	t.Helper()
	out := map[string]string{}
	off := 0
	align := func() { off = (off + 3) &^ 3 }
	for {
		if off+110 > len(b) {
			t.Fatalf("truncated header at %d", off)
		}
		h := string(b[off : off+110])
		if h[:6] != "070701" {
			t.Fatalf("bad magic %q at %d", h[:6], off)
		}
		field := func(i int) int {
			v, err := strconv.ParseUint(h[6+8*i:14+8*i], 16, 32)
			if err != nil {
				t.Fatalf("field %d: %v", i, err)
			}
			return int(v)
		}
		mode, size, namesize := field(1), field(6), field(11)
		off += 110
		name := string(b[off : off+namesize-1])
		if b[off+namesize-1] != 0 {
			t.Fatalf("%s: name not NUL-terminated", name)
		}
		off += namesize
		align()
		data := string(b[off : off+size])
		off += size
		align()
		if name == "TRAILER!!!" {
			if off != len(b) {
				t.Errorf("%d bytes after the trailer", len(b)-off)
			}
			return out
		}
		out[name] = fmt.Sprintf("%o:%s", mode, data)
	}
}

func TestImageWritesNewc(t *testing.T) {
	im := newImage()
	im.data("/etc/passwd", 0o644, []byte("root:x:0:0::/root:/bin/sh\n"))
	im.data("/a/b/c/odd", 0o755, []byte("12345")) // size not a multiple of 4
	im.symlink("/bin", "usr/bin")
	im.dir("/tmp", 0o1777)
	p := filepath.Join(t.TempDir(), "initrd")
	if err := im.write(p); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	got := readNewc(t, b)
	want := map[string]string{
		"etc":        "40755:",
		"etc/passwd": "100644:root:x:0:0::/root:/bin/sh\n",
		"a":          "40755:",
		"a/b":        "40755:",
		"a/b/c":      "40755:",
		"a/b/c/odd":  "100755:12345",
		"bin":        "120777:usr/bin",
		"tmp":        "41777:",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: got %q, want %q", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("entries %v, want %d", got, len(want))
	}
}

// TestHostProgramCopiesLoaderAndLibraries copies /bin/sh: the image must hold the
// binary, its ELF interpreter and its libc, each reachable at the path the host uses.
func TestHostProgramCopiesLoaderAndLibraries(t *testing.T) {
	im := newImage()
	if err := im.hostProgram("/bin/sh"); err != nil {
		t.Fatal(err)
	}
	resolve := func(p string) string { // follow the image's symlinks like the kernel would
		for i := 0; i < 40; i++ {
			changed := false
			for link, target := range im.symlinks {
				if p == link || strings.HasPrefix(p, link+"/") {
					if !filepath.IsAbs(target) {
						target = filepath.Join(filepath.Dir(link), target)
					}
					p = filepath.Join(target, strings.TrimPrefix(p, link))
					changed = true
				}
			}
			if !changed {
				return p
			}
		}
		t.Fatalf("symlink loop at %s", p)
		return ""
	}
	for _, want := range []string{"/bin/sh", "/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/libc.so.6"} {
		if _, err := os.Stat(want); err != nil {
			continue // another layout; what exists is checked
		}
		if _, ok := im.files[resolve(want)]; !ok {
			t.Errorf("%s (resolved %s) not in the image", want, resolve(want))
		}
	}
}

func TestParsePackages(t *testing.T) {
	const index = `Package: linux-image-6.1.0-50-amd64
Source: linux-signed-amd64 (6.1.176+1)
Version: 6.1.176-1
Description: Linux 6.1 for 64-bit PCs (signed)
 The Linux kernel 6.1 and modules for use on PCs with AMD64, Intel 64 or
 Filename: not/this/one.deb
Filename: pool/main/l/linux-signed-amd64/linux-image-6.1.0-50-amd64_6.1.176-1_amd64.deb
Size: 70305560
SHA256: 7b5597492a0a65aee61985a492e6bcc3f2cde830072a0e3b3d8c7e1b90279bd3

Package: linux-image-6.1.0-47-amd64
Version: 6.1.170-1
Filename: pool/other.deb
SHA256: 0000000000000000000000000000000000000000000000000000000000000000
`
	got, err := parsePackages(strings.NewReader(index), map[string]bool{"linux-image-6.1.0-50-amd64": true})
	if err != nil {
		t.Fatal(err)
	}
	e, ok := got["linux-image-6.1.0-50-amd64"]
	if !ok || len(got) != 1 {
		t.Fatalf("got %v", got)
	}
	if e.Filename != "pool/main/l/linux-signed-amd64/linux-image-6.1.0-50-amd64_6.1.176-1_amd64.deb" ||
		e.SHA256 != "7b5597492a0a65aee61985a492e6bcc3f2cde830072a0e3b3d8c7e1b90279bd3" ||
		e.Size != 70305560 || e.Version != "6.1.176-1" {
		t.Errorf("entry %+v", e)
	}
	if c := listPackages(strings.NewReader(index), "linux-image-6.1.0-"); len(c) != 2 {
		t.Errorf("candidates %v", c)
	}
}

func TestModuleNames(t *testing.T) {
	for _, tc := range []struct{ path, name, comp, rel string }{
		{"lib/modules/5.10.0-32-amd64/kernel/fs/overlayfs/overlay.ko", "overlay", "", "5.10.0-32-amd64"},
		{"usr/lib/modules/6.12.117+deb13-amd64/kernel/fs/overlayfs/overlay.ko.xz", "overlay", "xz", "6.12.117+deb13-amd64"},
		{"usr/lib/modules/7.2/kernel/net/9p/9pnet-virtio.ko.zst", "9pnet_virtio", "zst", "7.2"},
		{"usr/lib/modules/7.2/modules.builtin", "", "-", "7.2"},
	} {
		name, comp := moduleName(tc.path)
		if name != tc.name || comp != tc.comp || releaseOf(tc.path) != tc.rel {
			t.Errorf("%s: %q %q %q", tc.path, name, comp, releaseOf(tc.path))
		}
	}
	for _, p := range []string{"boot/vmlinuz-5.10.0-32-amd64", "usr/lib/modules/7.2.13+deb14-amd64/vmlinuz"} {
		if !isVmlinuz(p) {
			t.Errorf("%s not recognised as vmlinuz", p)
		}
	}
	if isVmlinuz("usr/share/doc/vmlinuz") {
		t.Error("a doc path taken for vmlinuz")
	}
}

const goTestOutput = `=== RUN   TestA
--- PASS: TestA (0.00s)
=== RUN   TestB
    b_test.go:10: user namespaces unavailable (clone: operation not permitted)
--- SKIP: TestB (0.00s)
=== RUN   TestC
=== RUN   TestC/sub
    c_test.go:20: got 1
    c_test.go:21: want 2
=== NAME  TestC
    c_test.go:30: parent log
--- FAIL: TestC (0.01s)
    --- FAIL: TestC/sub (0.00s)
FAIL
`

func TestParseGoTest(t *testing.T) {
	rows := parseGoTest("kernel", goTestOutput)
	want := []TestRow{
		{"kernel", "TestA", "pass", ""},
		{"kernel", "TestB", "skip", "b_test.go:10: user namespaces unavailable (clone: operation not permitted)"},
		{"kernel", "TestC", "fail", "c_test.go:30: parent log"},
		{"kernel", "TestC/sub", "fail", "c_test.go:20: got 1\nc_test.go:21: want 2"},
	}
	quiet := parseGoTest("b", "=== RUN   TestP\n=== RUN   TestP/x\n    x_test.go:1: bad\n--- FAIL: TestP (0.00s)\n    --- FAIL: TestP/x (0.00s)\n")
	if len(quiet) != 2 || quiet[0].Reason != "a subtest failed" {
		t.Errorf("parent of a failed subtest: %+v", quiet)
	}
	if fmt.Sprint(rows) != fmt.Sprint(want) {
		t.Errorf("rows:\n%v\nwant:\n%v", rows, want)
	}
}

func TestParseConsole(t *testing.T) {
	console := "\x1b[2J\x1b[?7lSeaBIOS\r\n[    1.0] kernel noise\r\n" +
		vmproto.Prefix + "kernel 6.1.0-50-amd64\r\n" +
		vmproto.Prefix + "begin doctor\r\n{\"native_ready\": true}\r\n" +
		vmproto.Prefix + "end doctor 0\r\n" +
		vmproto.Prefix + "error load module overlay: exec format error\r\n" +
		vmproto.Prefix + "begin kernel\r\n" + strings.ReplaceAll(goTestOutput, "\n", "\r\n") +
		vmproto.Prefix + "end kernel 1\r\n" +
		vmproto.Prefix + "begin vmtest\r\n=== RUN   TestExecTrue\r\n"
	log := parseConsole([]byte(console))
	if log.Release != "6.1.0-50-amd64" || log.Done || len(log.Errors) != 1 || len(log.Sections) != 3 {
		t.Fatalf("parsed %+v", log)
	}
	d, k, v := log.Sections[0], log.Sections[1], log.Sections[2]
	if d.Name != "doctor" || !d.Ended || d.Status != 0 || strings.TrimSpace(d.Output) != `{"native_ready": true}` {
		t.Errorf("doctor section %+v", d)
	}
	if k.Status != 1 || !k.Ended || len(parseGoTest("kernel", k.Output)) != 4 {
		t.Errorf("kernel section %+v", k)
	}
	if v.Ended || v.Status != -1 || !strings.Contains(v.Output, "TestExecTrue") {
		t.Errorf("unfinished section %+v", v)
	}
}

// TestEvaluate: the verdict of a cell follows what the console shows, and a doctor
// verdict different from the cell's expectation is a failure.
func TestEvaluate(t *testing.T) {
	doctor := func(ready bool, exit int) section {
		return section{Name: vmproto.Doctor, Ended: true, Status: exit,
			Output: fmt.Sprintf(`{"kernel":"6.1.0","checks":[{"name":"userns","ok":true}],"native_ready":%v}`, ready)}
	}
	kernel := section{Name: "kernel", Ended: true, Status: 0, Output: "=== RUN   TestA\n--- PASS: TestA (0.00s)\nPASS\n"}
	for _, tc := range []struct {
		name     string
		cell     Cell
		log      consoleLog
		problems int
	}{
		{"clean", Cell{NativeReady: true}, consoleLog{Release: "6.1.0", Done: true, Sections: []section{doctor(true, 0), kernel}}, 0},
		{"no boot", Cell{NativeReady: true}, consoleLog{}, 1},
		{"wrong verdict", Cell{NativeReady: false}, consoleLog{Release: "6.1.0", Done: true, Sections: []section{doctor(true, 0), kernel}}, 1},
		{"exit disagrees", Cell{NativeReady: true}, consoleLog{Release: "6.1.0", Done: true, Sections: []section{doctor(true, 1), kernel}}, 1},
		{"binary crashed", Cell{NativeReady: true}, consoleLog{Release: "6.1.0", Done: true,
			Sections: []section{doctor(true, 0), {Name: "kernel", Ended: true, Status: 2, Output: "panic: boom\n"}}}, 1},
		{"hung", Cell{NativeReady: true}, consoleLog{Release: "6.1.0", Sections: []section{doctor(true, 0), {Name: "kernel", Status: -1}}}, 2},
		{"other kernel", Cell{NativeReady: true}, consoleLog{Release: "5.10.0", Done: true, Sections: []section{doctor(true, 0), kernel}}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r Result
			r.evaluate(tc.cell, KernelFiles{Release: "6.1.0"}, tc.log)
			if len(r.Problems) != tc.problems {
				t.Errorf("problems %q, want %d", r.Problems, tc.problems)
			}
		})
	}
}

func TestDefaultCellsCoverTheIssue(t *testing.T) {
	suites := map[string]bool{}
	userNSOff := false
	names := map[string]bool{}
	for _, c := range DefaultCells {
		if names[c.Name] {
			t.Errorf("cell %s twice", c.Name)
		}
		names[c.Name] = true
		suites[c.Kernel.Suite] = true
		if strings.Contains(c.Cmdline, "unprivileged_userns_clone=0") {
			userNSOff = true
			if c.NativeReady {
				t.Errorf("%s: user namespaces off, yet expected ready", c.Name)
			}
		}
	}
	for _, s := range []string{"bullseye", "bookworm", "trixie", "sid"} {
		if !suites[s] {
			t.Errorf("no cell for %s", s)
		}
	}
	if !userNSOff {
		t.Error("no cell with unprivileged user namespaces switched off")
	}
}

func TestBootFailureAndCrashReason(t *testing.T) {
	console := "SeaBIOS\r\n[    0.048000] Kernel panic - not syncing: IO-APIC + timer doesn't work!\r\n[    0.048000] Call Trace:\r\n"
	if got := bootFailure([]byte(console)); !strings.HasPrefix(got, "[    0.048000] Kernel panic - not syncing: IO-APIC") {
		t.Errorf("bootFailure = %q", got)
	}
	out := "=== RUN   TestPromises\npanic: test timed out after 4m0s\n\trunning tests:\n\t\tTestPromises/native/P1 (1m2s)\n\ngoroutine 1 [running]:\n"
	if got := crashReason(out); !strings.HasPrefix(got, "panic: test timed out") || !strings.Contains(got, "TestPromises/native/P1") {
		t.Errorf("crashReason = %q", got)
	}
}

// A skip inside a VM passes its cell only as a kernel gate for a feature doctor
// measured missing there; any other skip, or a gate for a feature that is present,
// fails the cell.
func TestUnjustifiedSkips(t *testing.T) {
	if testenv.KernelGate != vmproto.KernelGate {
		t.Fatalf("testenv.SkipKernel writes %q, kmatrix parses %q", testenv.KernelGate, vmproto.KernelGate)
	}
	features := []Feature{{Name: "userns", OK: false}, {Name: "mount_setattr", OK: true}}
	for _, tc := range []struct {
		reason string
		ok     bool
	}{
		{"probe_linux_test.go:52: " + vmproto.KernelGate + "userns: user namespaces unavailable", true},
		{"a_test.go:1: setting up\nprobe_linux_test.go:52: " + vmproto.KernelGate + "userns: off", true},
		{"raw_test.go:55: " + vmproto.KernelGate + "mount_setattr: the raw init needs Linux 5.12", false},
		{"raw_test.go:55: " + vmproto.KernelGate + "time_travel: needs it", false},
		{"raw_test.go:55: " + vmproto.KernelGate + "userns", false},
		{"smoke_test.go:9: socat missing", false},
		{"", false},
	} {
		got := unjustifiedSkips([]TestRow{{"b", "TestX", "skip", tc.reason}}, features)
		if (len(got) == 0) != tc.ok {
			t.Errorf("skip %q: problems %q, want accepted=%v", tc.reason, got, tc.ok)
		}
	}
	if got := unjustifiedSkips([]TestRow{{"b", "TestX", "pass", ""}, {"b", "TestY", "fail", "x"}}, nil); len(got) != 0 {
		t.Errorf("passes and failures taken for skips: %q", got)
	}
}
