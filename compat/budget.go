package compat

import (
	"fmt"
	"path"
	"strconv"

	"github.com/agentbox/agentbox/mounts"
)

// The tmpfs budget under bwrap (mounts.Plan.TmpSize). bubblewrap can size a
// --tmpfs but not share one between mounts, and gives no size to its /dev or to
// --tmp-overlay's upper layer. So a launch mounts one tmpfs of the budget's size
// itself, in the namespace bwrap starts in (stage_linux.go), at BudgetRoot, with
// one directory per RAM-backed filesystem of the plan; bwrap binds each in place
// (--bind BudgetRoot/N DEST) and takes the HOME overlay's upper and work
// directories from it (--overlay). Together they hold no more than the budget, as
// under the native backend. bwrap's own /dev tmpfs, which it makes writable and
// cannot size, is made read-only once everything below it is in place: its
// nodes, devpts and shm (the budget's) stay as they are.
//
// The budget's root is covered in the sandbox: BudgetRoot is /run, over which the
// plan always puts its own /run (one of the budget's directories).
const BudgetRoot = "/run"

// Budget is the tmpfs a launch mounts before bwrap: Size bytes, and Modes[i] the
// permission bits of its directory BudgetRoot/i.
type Budget struct {
	Size  int64
	Modes []uint32
}

// Options is the budget's tmpfs mount data, the native backend's.
func (b *Budget) Options() string { return mounts.BudgetOptions(b.Size) }

// dir adds a directory with mode and returns its path.
func (b *Budget) dir(mode uint32) string {
	b.Modes = append(b.Modes, mode)
	return path.Join(BudgetRoot, strconv.Itoa(len(b.Modes)-1))
}

// budgetBind is the pseudo-option groups emits for a bind of a budget directory,
// which initGroups turns into --bind once the host sources have become descriptors
// (a budget directory is no host path: it exists only where bwrap starts).
const budgetBind = "--budget-bind"

// budgetOpts translates the operations that draw on the budget (Tmpfs, Dev's shm,
// the Overlay's upper layer), which translate has checked; ok is false for every
// other kind.
func budgetOpts(op mounts.Op, lower lowerFunc, b *Budget) (opts [][]string, ok bool, err error) {
	switch op.Kind {
	case mounts.Tmpfs:
		return [][]string{{budgetBind, b.dir(op.Mode), op.Dest}}, true, nil
	case mounts.Dev:
		return [][]string{{"--dev", op.Dest}, {budgetBind, b.dir(0o1777), path.Join(op.Dest, "shm")}}, true, nil
	case mounts.Overlay:
		mode, err := lower(op.Source)
		if err != nil {
			return nil, true, err
		}
		// overlayfs wants the upper and work directories on one filesystem.
		upper, work := b.dir(0o755), b.dir(0o700)
		return [][]string{
			{"--overlay-src", op.Source, "--overlay", upper, work, op.Dest},
			{"--chmod", fmt.Sprintf("%04o", mode), op.Dest},
		}, true, nil
	}
	return nil, false, nil
}
