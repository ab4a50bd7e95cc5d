package sandbox

import "runtime/debug"

// module is agentbox's module path, whose version the Go API records.
const module = "github.com/agentbox/agentbox"

// version is the agentbox module's version in the calling program's build, for the
// session's record and snapshots: the version the program required, or "(devel)"
// when agentbox is the program's own module.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown)"
	}
	if bi.Main.Path == module {
		return bi.Main.Version
	}
	for _, d := range bi.Deps {
		if d.Path == module {
			return d.Version
		}
	}
	return "(unknown)"
}
