//go:build !linux

package termout

import (
	"errors"
	"os"
)

func isTerminal(*os.File) bool { return false }

func reopenNonblocking(*os.File) (*os.File, error) { return nil, errors.New("not on this system") }

func columns(*os.File) int { return 0 }
