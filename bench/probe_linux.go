package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/sandbox"
)

// probeRun is the probe's answer to "run".
type probeRun struct {
	WallNS int64           `json:"wall_ns"`
	CPUNS  int64           `json:"cpu_ns"` // the probe's own CPU plus its children's, for this launch
	Status int             `json:"status"`
	Phases []sandbox.Phase `json:"phases,omitempty"`
	Err    string          `json:"err,omitempty"`
}

// probeBurst is the probe's answer to "burst": burstLaunches launches back to back.
type probeBurst struct {
	WallNS   int64  `json:"wall_ns"` // from the first launch's start to the last one's end
	Launches int    `json:"launches"`
	Err      string `json:"err,omitempty"` // the first failure; the burst stops there
}

// burstLaunches is how many launches one "burst" runs back to back: enough that a
// Prestart refill which has not finished when the next launch wants it shows.
const burstLaunches = 10

// probeRSS is the probe's answer to "rss".
type probeRSS struct {
	SelfKiB     int64 `json:"self_kib"`     // the probe: a small Go program using the API
	ChildrenKiB int64 `json:"children_kib"` // the largest peak an init reported of itself
}

// ServeAPI is the Go API variant's probe (`agentbox bench --serve-api`): a small,
// already running Go program that launches opts through sandbox.Run each time it reads
// "run" from r, and answers with one JSON line on w measured around the call. "rss"
// answers with the peak RSS of the probe and of the largest init it ran. It returns
// at EOF. With prestart, sandbox.Prestart keeps an init ready for each next launch.
// "burst" runs burstLaunches launches back to back and answers with their total time:
// throughput, where "run" is latency (a Prestart refill runs after a launch returns,
// so it is off one launch's latency but not off a stream of launches).
func ServeAPI(r io.Reader, w io.Writer, opts sandbox.Options, prestart bool) error {
	// The init is this very binary: agentbox's main hands the init role to nsinit.
	opts.InitBinary = "/proc/self/exe"
	// As the launch variants run (--no-git-save --no-record): the audit on, the
	// snapshot and the record measured by their own benchmarks.
	opts.NoGitSave, opts.NoRecord = true, true
	if prestart {
		if err := sandbox.Prestart(opts); err != nil {
			return err
		}
		defer sandbox.StopPrestart()
	}
	in := bufio.NewScanner(r)
	enc := json.NewEncoder(w)
	var initPeak int64
	for in.Scan() {
		var err error
		switch in.Text() {
		case "run":
			run, peak := probeOnce(opts)
			initPeak = max(initPeak, peak)
			err = enc.Encode(run)
		case "burst":
			err = enc.Encode(probeBurstOnce(opts))
		case "rss":
			var self syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self)
			err = enc.Encode(probeRSS{SelfKiB: self.Maxrss, ChildrenKiB: initPeak})
		default:
			err = enc.Encode(probeRun{Err: "unknown request " + in.Text()})
		}
		if err != nil {
			return err
		}
	}
	return in.Err()
}

func probeOnce(opts sandbox.Options) (probeRun, int64) {
	var self0, kids0, self1, kids1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self0)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids0)
	t0 := time.Now()
	res, err := sandbox.Run(opts)
	wall := time.Since(t0)
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self1)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids1)
	out := probeRun{WallNS: int64(wall), CPUNS: cpuDelta(self0, self1) + cpuDelta(kids0, kids1), Status: res.Status, Phases: res.Phases}
	if err != nil {
		out.Err = err.Error()
	}
	return out, res.InitPeakRSSKiB
}

func probeBurstOnce(opts sandbox.Options) probeBurst {
	out := probeBurst{}
	t0 := time.Now()
	for out.Launches < burstLaunches {
		res, err := sandbox.Run(opts)
		if err == nil && res.Status != 0 {
			err = fmt.Errorf("command exited %d", res.Status)
		}
		if err != nil {
			out.Err = err.Error()
			break
		}
		out.Launches++
	}
	out.WallNS = int64(time.Since(t0))
	return out
}

func cpuDelta(a, b syscall.Rusage) int64 {
	return b.Utime.Nano() + b.Stime.Nano() - a.Utime.Nano() - a.Stime.Nano()
}
