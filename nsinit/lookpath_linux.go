package nsinit

// LookPath finds name the way the init does before it starts the command (PATH
// searched as a shell does; a directory or a non-executable file refused), for
// --dry-run, which must refuse what the real launch would refuse. It looks in the
// caller's view of the filesystem.
func LookPath(name, pathEnv string) (string, error) {
	return lookPath(name, pathEnv)
}
