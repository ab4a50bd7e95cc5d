package nsinit

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestNoWindowHas: the sizes the launcher puts back are those no window has; a
// size a window may have is left, whoever set it.
func TestNoWindowHas(t *testing.T) {
	launch := unix.Winsize{Row: 24, Col: 80}
	for _, tt := range []struct {
		now, launch unix.Winsize
		want        bool
	}{
		{launch, launch, false},
		{unix.Winsize{Row: 50, Col: 200}, launch, false},
		{unix.Winsize{Row: 1, Col: 1}, launch, false},
		{unix.Winsize{Row: 10000, Col: 10000}, launch, false},
		{unix.Winsize{}, launch, true},
		{unix.Winsize{Row: 24}, launch, true},
		{unix.Winsize{Col: 80}, launch, true},
		{unix.Winsize{Row: 10001, Col: 80}, launch, true},
		{unix.Winsize{Row: 24, Col: 65535}, launch, true},
		// A terminal that had no size at the launch (a serial line) may be left with none.
		{unix.Winsize{}, unix.Winsize{Xpixel: 1}, false},
	} {
		if got := noWindowHas(tt.now, tt.launch); got != tt.want {
			t.Errorf("noWindowHas(%+v, launch %+v) = %v, want %v", tt.now, tt.launch, got, tt.want)
		}
	}
}
