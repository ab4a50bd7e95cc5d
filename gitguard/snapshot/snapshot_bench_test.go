package snapshot

import (
	"bufio"
	"bytes"
	"compress/zlib"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// benchRepo says what generateBenchRepo builds.
type benchRepo struct {
	loose    int // loose objects, 256 B to 8 KiB of content each
	packs    int // packs, one fast-import run each
	packSize int // bytes of random blob data per pack
}

// BenchmarkSnapshot compares SaveStored into an empty store with `zip -qr` and `cp -a` of the same .git.
// By default it uses a small generated repository (about 25 MB), cheap enough for CI.
// With AGENTBOX_BENCH_BIGREPO=1 it generates one of at least 500 MB below /var/tmp —
// 60,000 loose objects and three 120 MB packs, which takes a minute or two — and
// removes it afterwards. Each variant reports its mean (ns/op) and its median
// (median-ns/op); the repository is generated once per -count, so use -benchtime to
// get several samples:
//
//	AGENTBOX_BENCH_BIGREPO=1 go test ./gitguard/ -run '^$' -bench BenchmarkSnapshot -benchtime 3x
//
// The store fsyncs what it writes; zip and cp do not sync.
func BenchmarkSnapshot(b *testing.B) {
	spec := benchRepo{loose: 2000, packs: 2, packSize: 8 << 20}
	if os.Getenv("AGENTBOX_BENCH_BIGREPO") == "1" {
		spec = benchRepo{loose: 60000, packs: 3, packSize: 120 << 20}
	}
	base, err := os.MkdirTemp("/var/tmp", "agentbox-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(base) })
	repo := filepath.Join(base, "repo")
	size := generateBenchRepo(b, repo, spec)
	b.Logf("generated %s: .git holds %d MB", repo, size>>20)
	out := filepath.Join(base, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		b.Fatal(err)
	}

	b.Run("agentbox", func(b *testing.B) {
		b.SetBytes(size)
		var samples []time.Duration
		for range b.N {
			t0 := time.Now()
			store := filepath.Join(out, "store")
			if _, err := SaveStored(SnapshotOptions{Repo: repo, Dir: store, Version: "bench"}); err != nil {
				b.Fatal(err)
			}
			samples = append(samples, time.Since(t0))
			b.StopTimer()
			os.RemoveAll(store)
			b.StartTimer()
		}
		reportMedian(b, samples)
	})
	b.Run("zip", func(b *testing.B) {
		benchCommand(b, size, repo, out, "zip", "-qr", filepath.Join(out, "x.zip"), ".git")
	})
	b.Run("cp", func(b *testing.B) {
		benchCommand(b, size, repo, out, "cp", "-a", ".git", filepath.Join(out, "x"))
	})
}

// benchCommand times one run of the command per iteration and empties out after each.
func benchCommand(b *testing.B, size int64, dir, out string, name string, args ...string) {
	if _, err := exec.LookPath(name); err != nil {
		b.Skipf("%s is not installed (scripts/setup-test-env.sh installs it)", name)
	}
	b.SetBytes(size)
	var samples []time.Duration
	for range b.N {
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		t0 := time.Now()
		if msg, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%s: %v\n%s", name, err, msg)
		}
		samples = append(samples, time.Since(t0))
		b.StopTimer()
		ents, _ := os.ReadDir(out)
		for _, e := range ents {
			os.RemoveAll(filepath.Join(out, e.Name()))
		}
		b.StartTimer()
	}
	reportMedian(b, samples)
}

// reportMedian adds the median of the iterations as median-ns/op: with few, long
// iterations the mean is at the mercy of one slow run.
func reportMedian(b *testing.B, samples []time.Duration) {
	slices.Sort(samples)
	b.ReportMetric(float64(samples[len(samples)/2].Nanoseconds()), "median-ns/op")
}

// generateBenchRepo builds a repository at dir and returns the size of its .git.
// Packs come from git fast-import (random, incompressible blobs, as media or binaries
// are); loose objects are written directly, as Git writes them (zlib, level 1), with
// content half random and half text, because forking git per object would take
// minutes.
func generateBenchRepo(b *testing.B, dir string, spec benchRepo) int64 {
	b.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	testenv.LocalGit(b, dir, "init", "-q", "-b", "main")
	rng := rand.NewChaCha8([32]byte{1})
	for p := range spec.packs {
		fastImportPack(b, dir, rng, p, spec.packSize)
	}
	objects := filepath.Join(dir, ".git", "objects")
	r := rand.New(rng)
	for i := range spec.loose {
		n := 256 + r.IntN(8<<10-256)
		data := make([]byte, n)
		rng.Read(data[:n/2])
		for j := n / 2; j < n; j++ {
			data[j] = "abcdefghij klmnop\n"[r.IntN(18)]
		}
		writeLooseObject(b, objects, fmt.Appendf(data, "\n%d\n", i))
	}
	var size int64
	filepath.WalkDir(filepath.Join(dir, ".git"), func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				size += fi.Size()
			}
		}
		return nil
	})
	return size
}

// fastImportPack writes one pack of 8 MiB random blobs, committed on branch packN.
func fastImportPack(b *testing.B, dir string, rng *rand.ChaCha8, n, size int) {
	b.Helper()
	const blob = 8 << 20
	cmd := exec.Command("git", "-c", "pack.compression=1", "-c", "core.bigFileThreshold=1m", "fast-import", "--quiet")
	cmd.Dir = dir
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriterSize(stdin, 1<<20)
	buf := make([]byte, blob)
	count := size / blob
	for i := 1; i <= count; i++ {
		rng.Read(buf)
		fmt.Fprintf(w, "blob\nmark :%d\ndata %d\n", i, len(buf))
		w.Write(buf)
		w.WriteString("\n")
	}
	fmt.Fprintf(w, "commit refs/heads/pack%d\ncommitter t <t@example.invalid> 0 +0000\ndata 5\npack\n", n)
	for i := 1; i <= count; i++ {
		fmt.Fprintf(w, "M 100644 :%d blob%d.bin\n", i, i)
	}
	w.WriteString("\n")
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		b.Fatalf("git fast-import: %v\n%s", err, stderr.Bytes())
	}
}

// writeLooseObject stores data as a loose blob: "blob LEN\0DATA", zlib-compressed,
// named by its SHA-1, read-only.
func writeLooseObject(b *testing.B, objects string, data []byte) {
	obj := append(fmt.Appendf(nil, "blob %d\x00", len(data)), data...)
	sum := sha1.Sum(obj)
	id := hex.EncodeToString(sum[:])
	var z bytes.Buffer
	zw, _ := zlib.NewWriterLevel(&z, zlib.BestSpeed)
	zw.Write(obj)
	zw.Close()
	d := filepath.Join(objects, id[:2])
	if err := os.MkdirAll(d, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, id[2:]), z.Bytes(), 0o444); err != nil {
		b.Fatal(err)
	}
}
