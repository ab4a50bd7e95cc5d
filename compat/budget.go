package compat

import (
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/agentbox/agentbox/internal/hostpath"
	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/overlay"
)

// The tmpfs budget under bwrap (mounts.Plan.TmpSize). bubblewrap can size a --tmpfs
// but not share one between mounts, and gives no size to its /dev or to
// --tmp-overlay's upper layer. So a launch mounts one tmpfs of the budget's size
// itself, in the namespace bwrap starts in (the stage, stage_linux.go), with one
// directory per RAM-backed filesystem of the plan, and bwrap binds each in place
// and takes the HOME overlay's upper and work directories from one of them: together
// they hold no more than the budget, as under the native backend.
//
// The sandbox's mount table shows each directory at its destination only, never the
// budget's root nor a second place of a directory (tools that map a file to its other
// mounts, as Codex's sandbox does, find none). For that the stage mounts, at
// StageDir of its own namespace, a small tmpfs holding: root, a recursive bind of
// "/" with the holder's own copy taken out, which bwrap binds as the sandbox's "/" in
// place of the stage's own "/"; and 0, 1, … each the bind of one directory of the
// budget, whose root the stage then detaches. bwrap's own /dev tmpfs, which it makes
// writable and cannot size, is made read-only once its nodes, devpts, shm (the
// budget's) and the handed-in devices are in place.
//
// StageDir is the host's /dev/shm: the sandbox has its own, no operation's source
// may lie there (the policy refuses repositories, added directories, sockets and
// hidden paths in /dev; stageSources checks the rest), and the stage covers it in its
// own namespace only.
const StageDir = "/dev/shm"

// Budget is the tmpfs a launch mounts before bwrap: Size bytes, and Dirs its
// directories in order (StageDir/0, StageDir/1, …).
type Budget struct {
	Size int64
	Dirs []BudgetDir
	// PtyMax (mounts.Plan.PtyMax), when above 0: the stage mounts a devpts instance
	// of that max= at stagePts, which bwrap binds over its own /dev/pts (bwrap mounts
	// its devpts with no bound and takes no option for one).
	PtyMax int64
}

// stagePts is where the stage mounts the sandbox's devpts (Budget.PtyMax).
var stagePts = path.Join(StageDir, "pts")

// PtsOptions is the stage's devpts mount data, the native backend's.
func (b *Budget) PtsOptions() string {
	return mounts.DevptsOptions(b.PtyMax)
}

// BudgetDir is one directory of the budget: Mode its permission bits; Overlay, the
// HOME overlay's scratch (overlay.ScratchMode), which holds the upper directory
// (Mode: the overlay root's) and the work directory.
type BudgetDir struct {
	Mode    uint32
	Overlay bool
}

// Options is the budget's tmpfs mount data, the native backend's.
func (b *Budget) Options() string { return mounts.BudgetOptions(b.Size) }

// dir adds a directory and returns its stage path.
func (b *Budget) dir(d BudgetDir) string {
	b.Dirs = append(b.Dirs, d)
	return path.Join(StageDir, strconv.Itoa(len(b.Dirs)-1))
}

// stageRoot is where the stage puts its copy of "/" (see StageDir).
var stageRoot = path.Join(StageDir, "root")

// stageBind is the pseudo-option groups emits for a bind from the stage's holder,
// which initGroups turns into bwrap's option (x[1]) once the host sources have become
// descriptors: a stage path is no host path, it exists only where bwrap starts.
const stageBind = "--stage-bind"

// budgetOpts translates the operations that draw on the budget (Tmpfs, Dev's shm,
// the Overlay's upper layer) and the plan's "/", which comes from the stage's copy;
// ok is false for every other operation.
func budgetOpts(op mounts.Op, lower lowerFunc, b *Budget) (opts [][]string, ok bool, err error) {
	switch op.Kind {
	case mounts.BindRO:
		if op.Source != "/" || op.Dest != "/" {
			return nil, false, nil
		}
		return [][]string{{stageBind, "--ro-bind", stageRoot, "/"}}, true, nil
	case mounts.Tmpfs:
		if op.Mode&^0o7777 != 0 {
			return nil, true, fmt.Errorf("mode %o has bits beyond permissions", op.Mode)
		}
		return [][]string{{stageBind, "--bind", b.dir(BudgetDir{Mode: op.Mode}), op.Dest}}, true, nil
	case mounts.Dev:
		g := [][]string{{"--dev", op.Dest}, {stageBind, "--bind", b.dir(BudgetDir{Mode: 0o1777}), path.Join(op.Dest, "shm")}}
		if b.PtyMax > 0 {
			g = append(g, []string{stageBind, "--dev-bind", stagePts, path.Join(op.Dest, "pts")})
		}
		return g, true, nil
	case mounts.Overlay:
		if err := checkPath("source", op.Source); err != nil {
			return nil, true, err
		}
		mode, err := lower(op.Source)
		if err != nil {
			return nil, true, err
		}
		// overlayfs wants the upper and work directories on one filesystem.
		scratch := b.dir(BudgetDir{Mode: mode, Overlay: true})
		return [][]string{
			{"--overlay-src", op.Source, "--overlay", path.Join(scratch, overlay.UpperDir), path.Join(scratch, overlay.WorkDir), op.Dest},
			{"--chmod", fmt.Sprintf("%04o", mode), op.Dest},
		}, true, nil
	}
	return nil, false, nil
}

// stageSources refuses a host path bwrap resolves in the stage's namespace (a bind's
// source, the bwrap binary, the agentbox binary) that lies in StageDir, which the
// stage covers there: bwrap would bind the stage's holder instead.
func stageSources(paths ...string) error {
	for _, p := range paths {
		forms := []string{p}
		if c, err := filepath.EvalSymlinks(p); err == nil && c != p {
			forms = append(forms, c)
		}
		for _, f := range forms {
			if hostpath.Within(f, StageDir) {
				return fmt.Errorf("%s lies in %s, where the tmpfs budget (--tmp-size) is mounted before bwrap starts; move it, or use --backend native", p, StageDir)
			}
		}
	}
	return nil
}

// The stage: agentbox re-executed in the namespaces bwrap starts in (privateStage),
// which executes the bwrap binary the launcher checked, by the descriptor it
// checked (bwrapcheck.Binary.File), never by its path; with a budget it first mounts
// the tmpfs budget, holding CAP_SYS_ADMIN there as an ambient capability
// (stage_linux.go). Its command line is stageArgv0 LIMIT… FD SIZE DIR… -- BWRAP ARG…:
// each LIMIT NAME=N a user limit of the plan (mounts.UserLimit), which it writes
// holding CAP_SYS_RESOURCE there (a resource limit: sets on itself), FD the binary's descriptor, SIZE 0 for no budget,
// each DIR a directory's octal mode, with an "o" before it for the HOME overlay's
// scratch, and pN for a devpts of max=N (Budget.PtyMax); main asks IsStage first.
const (
	stageArgv0 = "agentbox-bwrap-stage"
	envStage   = "_AGENTBOX_BWRAP_STAGE"
)

// stageArgs is the stage's command line for the binary at descriptor fd and budget
// (nil: none), before bwrap's.
func stageArgs(fd int, b *Budget) []string {
	args := []string{stageArgv0, strconv.Itoa(fd), "0"}
	if b == nil {
		return append(args, "--")
	}
	args[2] = strconv.FormatInt(b.Size, 10)
	if b.PtyMax > 0 {
		args = append(args, "p"+strconv.FormatInt(b.PtyMax, 10))
	}
	for _, d := range b.Dirs {
		m := fmt.Sprintf("%04o", d.Mode)
		if d.Overlay {
			m = "o" + m
		}
		args = append(args, m)
	}
	return append(args, "--")
}

// limitArgs are the stage's LIMIT arguments for limits.
func limitArgs(limits []mounts.UserLimit) []string {
	out := make([]string, len(limits))
	for i, l := range limits {
		out[i] = l.Name + "=" + strconv.FormatInt(l.Max, 10)
	}
	return out
}

// parseLimits takes the LIMIT arguments off the front of args (limitArgs' inverse).
func parseLimits(args []string) ([]mounts.UserLimit, []string, error) {
	var out []mounts.UserLimit
	for len(args) > 0 && strings.Contains(args[0], "=") {
		name, v, _ := strings.Cut(args[0], "=")
		n, err := strconv.ParseInt(v, 10, 64)
		l := mounts.UserLimit{Name: name, Max: n}
		if err == nil {
			err = l.Check()
		}
		if err != nil {
			return nil, nil, fmt.Errorf("bad limit %q: %w", args[0], err)
		}
		out, args = append(out, l), args[1:]
	}
	return out, args, nil
}

// parseStage is stageArgs' inverse: the binary's descriptor, the budget (nil:
// none), and bwrap's command line.
func parseStage(args []string) (int, *Budget, []string, error) {
	sep := slices.Index(args, "--")
	if sep < 2 || sep+1 >= len(args) {
		return 0, nil, nil, fmt.Errorf("bad stage arguments %q", args)
	}
	fd, err := strconv.Atoi(args[0])
	if err != nil || fd < 3 {
		return 0, nil, nil, fmt.Errorf("bad descriptor %q", args[0])
	}
	size, err := strconv.ParseInt(args[1], 10, 64)
	switch {
	case err != nil || size < 0:
		return 0, nil, nil, fmt.Errorf("bad size %q", args[1])
	case size == 0 && sep > 2:
		return 0, nil, nil, fmt.Errorf("directories %q without a budget", args[2:sep])
	case size == 0:
		return fd, nil, args[sep+1:], nil
	}
	b := &Budget{Size: size}
	for _, a := range args[2:sep] {
		if n, ok := strings.CutPrefix(a, "p"); ok {
			m, err := strconv.ParseInt(n, 10, 64)
			if err != nil || m <= 0 || b.PtyMax != 0 {
				return 0, nil, nil, fmt.Errorf("bad pty bound %q", a)
			}
			b.PtyMax = m
			continue
		}
		ov := strings.HasPrefix(a, "o")
		m, err := strconv.ParseUint(strings.TrimPrefix(a, "o"), 8, 32)
		if err != nil || m&^0o7777 != 0 {
			return 0, nil, nil, fmt.Errorf("bad mode %q", a)
		}
		b.Dirs = append(b.Dirs, BudgetDir{Mode: uint32(m), Overlay: ov})
	}
	return fd, b, args[sep+1:], nil
}
