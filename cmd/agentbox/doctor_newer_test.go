package main

import (
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/kernel"
	"github.com/agentbox/agentbox/internal/seccomp"
)

// TestDoctorNamesNewerCalls: on a kernel newer than the seccomp filter's reviewed
// calls, doctor says that the calls added since fail inside with ENOSYS (README's
// troubles row for "Function not implemented"); on an older one it says nothing.
func TestDoctorNamesNewerCalls(t *testing.T) {
	for _, c := range []struct {
		release string
		want    bool
	}{{"7.2.13+deb14-amd64", true}, {"6.12.117+deb13-amd64", false}} {
		var b strings.Builder
		printDoctor(&b, doctorResult{Report: kernel.Report{Kernel: c.release}, NativeReady: true, NewerCallsRefused: seccomp.NewerThanFilter(c.release)})
		if got := strings.Contains(b.String(), "fail inside with ENOSYS"); got != c.want {
			t.Errorf("kernel %s: doctor names the newer calls: %v, want %v:\n%s", c.release, got, c.want, b.String())
		}
	}
}
