package behaviour

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// The launch benchmarks run each program the same way, as the unprivileged test user
// from this test process, so their ratios compare like with like:
//
//	go test ./test/behaviour -run '^$' -bench . -count 10 | benchstat -
//
// BenchmarkExecTrue is `agentbox exec -- true` under the full sandbox policy (snapshot
// and shadow record off: they are measured by their own benchmarks).

func benchBox(b *testing.B) *box {
	home := testenv.Dir(b, "bench-home")
	repo := filepath.Join(home, "repo")
	if err := os.MkdirAll(filepath.Join(repo, ".git", "hooks"), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, ".git", "config"), []byte("[core]\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	testenv.Chown(b, home)
	return &box{backend: "native", bin: testenv.Binary(b), home: home, repo: repo}
}

func benchRun(b *testing.B, home, dir string, name string, args ...string) {
	for b.Loop() {
		cmd := testenv.Command(b, home, name, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%s: %v\n%s", name, err, out)
		}
	}
}

func BenchmarkExecTrue(b *testing.B) {
	x := benchBox(b)
	benchRun(b, x.home, x.repo, x.bin, "exec", "--no-git-save", "--no-record", "--", "true")
}

func BenchmarkForkExecTrue(b *testing.B) {
	x := benchBox(b)
	benchRun(b, x.home, x.repo, "/bin/true")
}

func BenchmarkEmptyGoBinary(b *testing.B) {
	x := benchBox(b)
	src := filepath.Join(x.home, "empty.go")
	if err := os.WriteFile(src, []byte("package main\n\nfunc main() {}\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	bin := filepath.Join(x.home, "empty")
	build := exec.Command("go", "build", "-o", bin, src)
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GO111MODULE=off")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build empty binary: %v\n%s", err, out)
	}
	testenv.Chown(b, x.home)
	benchRun(b, x.home, x.repo, bin)
}
