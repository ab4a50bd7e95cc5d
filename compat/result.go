package compat

import (
	"os"
	"time"
)

// Stdio are the command's standard streams, handed to bwrap unchanged (a terminal
// stays a terminal).
type Stdio struct {
	Stdin, Stdout, Stderr *os.File
}

// Phase is one measured step of a bwrap launch.
type Phase struct {
	Name string // bwrap-check, bwrap-spawn (start to bwrap's clone), bwrap-run (start to exit)
	Dur  time.Duration
}

// Result is how a bwrap session ended.
type Result struct {
	Status int // the command's exit status, or 128+N for signal N
	// Signal, Left, Terminal: as nsinit.Result's (the signal that killed the
	// command, the processes left running and killed, a terminal session).
	Signal   int
	Left     int
	Terminal bool
	Version  string  // "bubblewrap X.Y.Z" of the binary that ran; "" when none passed the check
	Phases   []Phase // in order
}
