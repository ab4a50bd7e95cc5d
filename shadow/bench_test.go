package shadow

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// The recording benchmark compares what the issue asks for: recording a session's end
// state after it touched 10 files, against `git add -A && git commit` on a copy of the
// same repository with a warm index. The repository has AGENTBOX_BENCH_FILES files
// (default 2000, small enough for CI; the case is 50000), 100 per directory:
//
//	AGENTBOX_BENCH_FILES=50000 go test ./shadow/ -run '^$' -bench RecordEnd -benchtime 20x -count 5
//
// Compare the medians of the two sub-benchmarks' ns/op, and of git-cpu-ns/op (the CPU
// time of the Git processes, steadier than wall time on a shared machine).

var (
	fixtureMu sync.Mutex
	fixtures  = map[int]*fixture{}
)

type fixture struct {
	repo    string // recorded by the shadow store
	control string // a copy, committed with plain Git: its index is warm
	state   string
	home    string
	root    string
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, f := range fixtures {
		os.RemoveAll(f.root)
	}
	testenv.Cleanup() // for the end-to-end tests (e2e_test.go)
	os.Exit(code)
}

func benchFiles(b *testing.B) int {
	n := 2000
	if v := os.Getenv("AGENTBOX_BENCH_FILES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 10 {
			b.Fatalf("AGENTBOX_BENCH_FILES=%q: want a number ≥ 10", v)
		}
	}
	return n
}

func getFixture(b *testing.B, n int) *fixture {
	b.Helper()
	fixtureMu.Lock()
	defer fixtureMu.Unlock()
	if f := fixtures[n]; f != nil {
		return f
	}
	root, err := os.MkdirTemp("", "shadow-bench-")
	if err != nil {
		b.Fatal(err)
	}
	root, _ = filepath.EvalSymlinks(root)
	f := &fixture{root: root, repo: filepath.Join(root, "repo"), control: filepath.Join(root, "control"),
		state: filepath.Join(root, "state"), home: filepath.Join(root, "home")}
	fixtures[n] = f
	for _, dir := range []string{f.repo, f.home} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	for i := range n {
		path := filepath.Join(f.repo, fmt.Sprintf("d%03d", i/100), fmt.Sprintf("f%03d.txt", i%100))
		if i%100 == 0 {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				b.Fatal(err)
			}
		}
		if err := os.WriteFile(path, fmt.Appendf(nil, "file %d\n%s", i, make([]byte, 64)), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	if out, err := exec.Command("cp", "-a", f.repo, f.control).CombinedOutput(); err != nil {
		b.Fatalf("cp: %v %s", err, out)
	}
	hostGit(b, f.home, f.control, "init", "-q")
	hostGit(b, f.home, f.control, "add", "-A")
	hostGit(b, f.home, f.control, "commit", "-q", "-m", "init")
	// The shadow store's index warms on its first session.
	s, err := Open(f.state, f.repo)
	if err != nil {
		b.Fatal(err)
	}
	record(b, s, Record{Start: time.Now()}, nil)
	// Both indexes are now older than every file: no entry is racily clean.
	time.Sleep(1100 * time.Millisecond)
	return f
}

// round makes every rewrite's content new, across runs of a benchmark.
var round int

// touch10 rewrites 10 files spread over the tree.
func touch10(b *testing.B, repo string, n int) {
	b.Helper()
	round++
	for k := range 10 {
		i := (k*n/10 + round) % n
		path := filepath.Join(repo, fmt.Sprintf("d%03d", i/100), fmt.Sprintf("f%03d.txt", i%100))
		if err := os.WriteFile(path, fmt.Appendf(nil, "round %d file %d\n", round, i), 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

// childCPU sums the CPU time (user+sys) of the Git processes a timed section ran:
// on a loaded machine it compares the two sides more steadily than wall time.
type childCPU struct {
	t0, total time.Duration
	n         int
}

func childrenCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func (c *childCPU) start() { c.t0 = childrenCPU() }
func (c *childCPU) stop()  { c.total += childrenCPU() - c.t0; c.n++ }
func (c *childCPU) report(b *testing.B) {
	if c.n > 0 {
		b.ReportMetric(float64(c.total.Nanoseconds())/float64(c.n), "git-cpu-ns/op")
	}
}

func BenchmarkRecordEnd(b *testing.B) {
	n := benchFiles(b)
	f := getFixture(b, n)
	b.Run(fmt.Sprintf("files=%d/shadow", n), func(b *testing.B) {
		var cpu childCPU
		s, err := Open(f.state, f.repo)
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			b.StopTimer()
			ss, err := s.Begin(Record{Start: time.Now()})
			if err == nil {
				err = ss.Wait() // the start commit is not part of recording the end
			}
			if err != nil {
				b.Fatal(err)
			}
			touch10(b, f.repo, n)
			cpu.start()
			b.StartTimer()
			if err := ss.Finish(Record{End: time.Now()}); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			cpu.stop()
			b.StartTimer()
		}
		cpu.report(b)
	})
	b.Run(fmt.Sprintf("files=%d/git-add-commit", n), func(b *testing.B) {
		var cpu childCPU
		for b.Loop() {
			b.StopTimer()
			touch10(b, f.control, n)
			cpu.start()
			b.StartTimer()
			hostGit(b, f.home, f.control, "add", "-A")
			hostGit(b, f.home, f.control, "commit", "-q", "-m", "x")
			b.StopTimer()
			cpu.stop()
			b.StartTimer()
		}
		cpu.report(b)
	})
}

// BenchmarkRecordEndWalk is a ten-file session's record end as a session runs it:
// the audit's walks at both ends, the files edited in place (staged without Git).
//
//	AGENTBOX_BENCH_FILES=100000 go test ./shadow/ -run '^$' -bench RecordEndWalk -benchtime 8x
func BenchmarkRecordEndWalk(b *testing.B) {
	n := benchFiles(b)
	f := getFixture(b, n)
	s, err := Open(f.state, f.repo)
	if err != nil {
		b.Fatal(err)
	}
	// The fixture's first record took no walk: one that does, so the next stage from it.
	record(b, s, Record{Start: time.Now()}, nil)
	time.Sleep(1100 * time.Millisecond)
	b.Run(fmt.Sprintf("files=%d", n), func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			ss, err := s.BeginWalk(Record{Start: time.Now()}, walkOf(b, f.repo))
			if err == nil {
				err = ss.Wait()
			}
			if err != nil {
				b.Fatal(err)
			}
			touch10(b, f.repo, n)
			w := walkOf(b, f.repo)
			inPlace := s.inPlace
			b.StartTimer()
			if err := ss.FinishWalk(Record{End: time.Now()}, w); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if s.inPlace == inPlace {
				b.Fatal("the ten edits were not staged in place")
			}
			time.Sleep(1100 * time.Millisecond) // no entry within the next staging's clock slack
			b.StartTimer()
		}
	})
}

// BenchmarkStageInPlace is the largest part of a ten-file session's record end on
// a big tree, alone: ten files in ten directories edited, their blobs, their
// directories' trees and the index written without Git.
//
//	AGENTBOX_BENCH_FILES=20000 go test ./shadow/ -run '^$' -bench StageInPlace -benchtime 50x
func BenchmarkStageInPlace(b *testing.B) {
	n := benchFiles(b)
	f := getFixture(b, n)
	s, err := Open(f.state, f.repo)
	if err != nil {
		b.Fatal(err)
	}
	record(b, s, Record{Start: time.Now()}, nil) // an index with its cache tree
	var paths []string
	for k := range 10 {
		i := k * n / 10
		paths = append(paths, fmt.Sprintf("d%03d/f%03d.txt", i/100, i%100))
	}
	b.Run(fmt.Sprintf("files=%d", n), func(b *testing.B) {
		for r := 0; b.Loop(); r++ {
			b.StopTimer()
			for _, p := range paths {
				if err := os.WriteFile(filepath.Join(f.repo, p), fmt.Appendf(nil, "round %d of %s\n", r, p), 0o644); err != nil {
					b.Fatal(err)
				}
			}
			b.StartTimer()
			if _, _, err := s.stageInPlace(paths); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkBuildOneTopDirectory is the trees an in-place staging writes when
// ten files in ten directories changed and one directory holds the whole tree
// (src/ of the bench's 20,000-file repository): the top's, src/'s and the ten
// directories'. Index entries made in memory; the trees are written to a store.
//
//	go test ./shadow/ -run '^$' -bench BuildOneTopDirectory
func BenchmarkBuildOneTopDirectory(b *testing.B) {
	s, _ := openStore(b, newRepo(b, map[string]string{"f": "f\n"}))
	const dirs, per = 200, 100
	x := indexEntries{patched: map[int][]byte{}}
	for d := range dirs {
		for f := range per {
			name := fmt.Sprintf("src/d%04d/f%03d.txt", d, f)
			e := make([]byte, 62, (62+len(name)+8)&^7)
			binary.BigEndian.PutUint32(e[24:28], 0o100644)
			binary.BigEndian.PutUint32(e[40:44], uint32(d*per+f))
			binary.BigEndian.PutUint16(e[60:62], uint16(len(name)))
			e = append(e, name...)
			x.off = append(x.off, uint32(len(x.b)))
			x.b = append(x.b, append(e, make([]byte, cap(e)-len(e))...)...)
		}
	}
	oid := make([]byte, 20)
	for b.Loop() {
		src := &ctNode{name: "src", entries: -1}
		for d := range dirs {
			c := &ctNode{name: fmt.Sprintf("d%04d", d), entries: per, oid: oid}
			if d%(dirs/10) == 0 {
				c.entries, c.oid = -1, nil
			}
			src.children = append(src.children, c)
		}
		root := &ctNode{entries: -1, children: []*ctNode{src}}
		objs := s.startObjectWriter()
		if _, err := s.build(root, x, 0, len(x.off), "", &treeBufs{objs: objs}); err != nil {
			b.Fatal(err)
		}
		if err := objs.wait(); err != nil {
			b.Fatal(err)
		}
	}
}
