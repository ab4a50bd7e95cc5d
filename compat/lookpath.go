package compat

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentbox/agentbox/mounts"
)

// CommandError is a command that cannot start in the sandbox: not found, a
// directory, not executable. Run reports it before bwrap starts, so the user gets one
// line from agentbox rather than bwrap's execvp message.
type CommandError struct {
	Name   string
	Reason string
}

func (e *CommandError) Error() string { return fmt.Sprintf("command %s: %s", e.Name, e.Reason) }

// lookCommand finds plan's command as bwrap's execvp will, with the PATH bwrap
// inherits, in the sandbox's view of the filesystem as the plan builds it (see
// hostPath). It is a check for a clear message only: bwrap's execvp stays the
// authority, and a command this check passes may still fail there.
func lookCommand(plan mounts.Plan, pathEnv string) error {
	name := plan.Command[0]
	if strings.Contains(name, "/") {
		p := name
		if !filepath.IsAbs(p) {
			p = filepath.Join(plan.Workdir, p)
		}
		if err := checkExecutable(plan, p); err != nil {
			return &CommandError{Name: name, Reason: reason(err)}
		}
		return nil
	}
	if pathEnv == "" {
		pathEnv = "/bin:/usr/bin" // glibc execvp's default
	}
	var first error
	for _, dir := range filepath.SplitList(pathEnv) {
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(plan.Workdir, dir)
		}
		err := checkExecutable(plan, filepath.Join(dir, name))
		if err == nil {
			return nil
		}
		if first == nil && !errors.Is(err, fs.ErrNotExist) {
			first = err
		}
	}
	if first != nil {
		return &CommandError{Name: name, Reason: reason(first)}
	}
	return &CommandError{Name: name, Reason: "not found in PATH"}
}

var (
	errIsDir         = errors.New("is a directory")
	errNotExecutable = errors.New("is not executable")
)

func checkExecutable(plan mounts.Plan, p string) error {
	host, ok := hostPath(plan, p)
	if !ok {
		return fs.ErrNotExist
	}
	fi, err := os.Stat(host)
	switch {
	case err != nil:
		return err
	case fi.IsDir():
		return errIsDir
	case fi.Mode().Perm()&0o111 == 0:
		return errNotExecutable
	}
	return nil
}

func reason(err error) string {
	if errors.Is(err, fs.ErrNotExist) {
		return "not found"
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// hostPath returns the host path whose content p shows in the sandbox when the command
// starts, or false when p lies in a fresh, empty tmpfs. The last plan operation whose
// destination contains p decides, because later mounts cover earlier ones: a bind,
// read-only bind or overlay shows its source, a tmpfs shows nothing, proc and dev are
// taken as the host's own.
func hostPath(plan mounts.Plan, p string) (string, bool) {
	p = filepath.Clean(p)
	for i := len(plan.Ops) - 1; i >= 0; i-- {
		op := plan.Ops[i]
		rel, ok := within(p, op.Dest)
		if !ok {
			continue
		}
		switch op.Kind {
		case mounts.Tmpfs:
			return "", false
		case mounts.BindRO, mounts.Bind, mounts.Overlay:
			return filepath.Join(op.Source, rel), true
		}
		return p, true
	}
	return p, true
}

// within reports whether p is dir or below it, and the rest of p relative to dir.
func within(p, dir string) (string, bool) {
	dir = filepath.Clean(dir)
	if p == dir {
		return ".", true
	}
	if dir == "/" {
		return strings.TrimPrefix(p, "/"), true
	}
	if rest, ok := strings.CutPrefix(p, dir+"/"); ok {
		return rest, true
	}
	return "", false
}
