//go:build !(linux && amd64)

package nsinit

import "os"

// rawCatch: the raw handler is amd64-only (signals_linux_amd64.s); os/signal it is.
type rawCatch struct{}

func catchRaw([]os.Signal) (*rawCatch, bool)       { return nil, false }
func (*rawCatch) toRecords(*os.File) bool          { return false }
func (*rawCatch) toPipe() (<-chan os.Signal, bool) { return nil, false }
func (*rawCatch) uncaught()                        {}
func (*rawCatch) stop()                            {}
