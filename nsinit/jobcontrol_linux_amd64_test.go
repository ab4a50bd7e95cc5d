package nsinit

// rawInitHere reports whether the raw init runs on this machine.
func rawInitHere() bool { return rawUsable() }
