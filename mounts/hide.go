package mounts

// EmptySources are the empty, read-only stand-ins the launcher keeps for hidden
// paths: a directory and a regular file, bound over each hidden one of that type.
type EmptySources struct {
	Dir, File string
}
