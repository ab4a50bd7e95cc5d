package shadow

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/agentbox/agentbox/gitguard/audit"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// The checkpoint and undo benchmarks against `git status` on a copy of the same
// repository (the fixture's control, warm index), interleaved: each round takes
// one of each, after the same ten files changed in both trees (or none). They
// report the medians and their ratio; the targets are a ten-file
// checkpoint ≤ 1.2×, an unchanged one ≤ 0.5× and the undo of a ten-file session
// ≤ 1.5× `git status`.
//
//	AGENTBOX_BENCH_FILES=100000 go test ./shadow/ -run '^$' -bench 'Checkpoint|UndoVsStatus' -benchtime 15x

// medians reports the medians of ours and of git status, and their ratio.
func medians(b *testing.B, ours, status []time.Duration) {
	med := func(d []time.Duration) time.Duration {
		s := slices.Clone(d)
		slices.Sort(s)
		return s[len(s)/2]
	}
	if len(ours) == 0 || len(status) == 0 {
		return
	}
	m, g := med(ours), med(status)
	b.ReportMetric(float64(m.Microseconds())/1000, "ms-median")
	b.ReportMetric(float64(g.Microseconds())/1000, "status-ms-median")
	b.ReportMetric(float64(m)/float64(g), "x-status")
}

// gitStatus times `git status` in the control copy, as a user runs it.
func gitStatus(b *testing.B, f *fixture) time.Duration {
	cmd := exec.Command("git", "status", "--porcelain")
	cmd.Dir, cmd.Env = f.control, []string{"HOME=" + f.home, "PATH=/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM=1"}
	t := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("git status: %v %s", err, out)
	}
	return time.Since(t)
}

// BenchmarkCheckpoint is a checkpoint as the launcher takes one mid-session: the
// launch's watch, a walk of what it saw change (audit.Launch.Peek), the step.
func BenchmarkCheckpoint(b *testing.B) {
	n := benchFiles(b)
	f := getFixture(b, n)
	s, err := Open(f.state, f.repo)
	if err != nil {
		b.Fatal(err)
	}
	for _, changed := range []bool{true, false} {
		b.Run(fmt.Sprintf("files=%d/changed=%t", n, changed), func(b *testing.B) {
			// A session's launch, as the audit baseline takes it.
			base, err := audit.Scan(f.repo, audit.ScanOptions{Walk: true, Watch: true})
			if err != nil {
				b.Fatal(err)
			}
			if base.Launch == nil {
				b.Skip("no watch on this kernel")
			}
			defer base.Launch.Close()
			ss, err := s.BeginWalk(Record{Start: time.Now()}, base.Walk)
			if err == nil {
				err = ss.Wait()
			}
			if err != nil {
				b.Fatal(err)
			}
			var ours, status []time.Duration
			for b.Loop() {
				b.StopTimer()
				if changed {
					touch10(b, f.repo, n)
					touch10(b, f.control, n)
				}
				b.StartTimer()
				t := time.Now()
				cur, err := audit.Scan(f.repo, audit.ScanOptions{Walk: true, Since: base.Launch.Peek(), WalkHint: len(base.Walk.Entries)})
				if err != nil {
					b.Fatal(err)
				}
				st, err := ss.Checkpoint("bench", cur.Walk, 0)
				if err != nil {
					b.Fatal(err)
				}
				ours = append(ours, time.Since(t))
				b.StopTimer()
				if changed && st.Files.Changed != 10 {
					b.Fatalf("the checkpoint counts %+v, want 10 changed", st.Files)
				}
				status = append(status, gitStatus(b, f))
				b.StartTimer()
			}
			b.StopTimer()
			medians(b, ours, status)
			base.Launch.Stop()
			end, err := audit.Scan(f.repo, audit.ScanOptions{Walk: true, Since: base.Launch})
			if err != nil {
				b.Fatal(err)
			}
			if err := ss.FinishWalk(Record{End: time.Now()}, end.Walk); err != nil {
				b.Fatal(err)
			}
			time.Sleep(1100 * time.Millisecond) // no entry within the next staging's clock slack
		})
	}
}

// BenchmarkUndoVsStatus is `agentbox undo` (the binary, as a user runs it) of a
// session that changed ten files, recorded as a session records them.
func BenchmarkUndoVsStatus(b *testing.B) {
	n := benchFiles(b)
	f := getFixture(b, n)
	bin := testenv.Binary(b)
	xdg := filepath.Join(f.root, "xdg")
	s, err := Open(filepath.Join(xdg, "agentbox"), f.repo)
	if err != nil {
		b.Fatal(err)
	}
	record(b, s, Record{Start: time.Now()}, nil) // the first record of this store sweeps
	time.Sleep(1100 * time.Millisecond)
	b.Run(fmt.Sprintf("files=%d", n), func(b *testing.B) {
		var ours, status []time.Duration
		for b.Loop() {
			b.StopTimer()
			record(b, s, Record{Start: time.Now(), Command: []string{"touch10"}}, func() { touch10(b, f.repo, n) })
			touch10(b, f.control, n)
			cmd := exec.Command(bin, "undo", "--repo", f.repo)
			cmd.Env = []string{"HOME=" + f.home, "XDG_STATE_HOME=" + xdg, "PATH=/usr/bin:/bin"}
			b.StartTimer()
			t := time.Now()
			out, err := cmd.CombinedOutput()
			ours = append(ours, time.Since(t))
			b.StopTimer()
			if err != nil {
				b.Fatalf("agentbox undo: %v\n%s", err, out)
			}
			status = append(status, gitStatus(b, f))
			time.Sleep(1100 * time.Millisecond)
			b.StartTimer()
		}
		b.StopTimer()
		medians(b, ours, status)
	})
}
