package nsinit

import (
	"os"
	"testing"
)

// BenchmarkLaunch is one whole launch of /bin/true through each runner of the
// compiled plan (the Go init re-executed from the test binary, and the raw init where
// it runs), on minimalPlan: `go test -run '^$' -bench Launch ./nsinit`, as an
// ordinary user or as root.
func BenchmarkLaunch(b *testing.B) {
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer null.Close()
	for _, r := range []struct {
		name string
		raw  bool
	}{{"go-init", false}, {"raw-init", true}} {
		if r.raw && !rawUsable() {
			continue
		}
		b.Run(r.name, func(b *testing.B) {
			opts := Options{Stdio: Stdio{Stdin: null, Stdout: null, Stderr: null}, RawInit: r.raw}
			for b.Loop() {
				if r.raw {
					waitRawFreeB(b)
				}
				res, err := Run(minimalPlan("/bin/true"), opts)
				if err != nil || res.Status != 0 {
					b.Fatalf("launch: %v, status %d", err, res.Status)
				}
			}
		})
	}
}
