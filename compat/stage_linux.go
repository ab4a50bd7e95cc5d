package compat

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"runtime"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/mounts"
)

// The stage: agentbox re-executed in the namespaces bwrap starts in
// (privateStage), where it holds CAP_SYS_ADMIN as an ambient capability, to mount
// the tmpfs budget (budget.go) before it executes bwrap. Its command line is
// stageArgv0 SIZE MODE… -- BWRAP ARG…; main asks IsStage first.
const (
	stageArgv0 = "agentbox-bwrap-stage"
	envStage   = "_AGENTBOX_BWRAP_STAGE"
)

// IsStage reports whether this process is the stage. main asks first.
func IsStage() bool {
	return os.Getenv(envStage) == "1" && len(os.Args) > 0 && os.Args[0] == stageArgv0
}

// StageMain mounts the budget and executes bwrap; it returns only on failure, and
// then exits 125 having said why (the launcher says bwrap failed before the
// command started, its message above).
func StageMain() {
	// The ambient capabilities are dropped on this thread, which then executes bwrap.
	runtime.LockOSThread()
	err := stage(os.Args[1:])
	fmt.Fprintf(os.Stderr, "agentbox: bwrap backend: tmpfs budget: %v\n", err)
	os.Exit(125)
}

func stage(args []string) error {
	sep := slices.Index(args, "--")
	if sep < 1 || sep+1 >= len(args) {
		return fmt.Errorf("bad stage arguments %q", args)
	}
	size, err := strconv.ParseInt(args[0], 10, 64)
	if err != nil || size <= 0 {
		return fmt.Errorf("bad size %q", args[0])
	}
	if err := unix.Mount("tmpfs", BudgetRoot, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, mounts.BudgetOptions(size)); err != nil {
		return fmt.Errorf("mount tmpfs on %s: %w", BudgetRoot, err)
	}
	for i, m := range args[1:sep] {
		mode, err := strconv.ParseUint(m, 8, 32)
		if err != nil || mode&^0o7777 != 0 {
			return fmt.Errorf("bad mode %q", m)
		}
		dir := path.Join(BudgetRoot, strconv.Itoa(i))
		if err := unix.Mkdir(dir, 0o700); err != nil {
			return err
		}
		// mkdir applies the umask; the mode is the plan's.
		if err := unix.Chmod(dir, uint32(mode)); err != nil {
			return err
		}
	}
	// bwrap, not setuid, refuses to start with capabilities; the ambient set would
	// keep CAP_SYS_ADMIN across the exec.
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("drop ambient capabilities: %w", err)
	}
	os.Unsetenv(envStage)
	bwrap := args[sep+1:]
	return fmt.Errorf("execute %s: %w", bwrap[0], unix.Exec(bwrap[0], bwrap, os.Environ()))
}

// stageCommand makes cmd, which would execute bwrap in privateStage's namespaces,
// execute the stage (the agentbox binary exe) with bwrap's command line, to mount
// budget first.
func stageCommand(cmd *exec.Cmd, exe string, budget *Budget) {
	args := []string{stageArgv0, strconv.FormatInt(budget.Size, 10)}
	for _, m := range budget.Modes {
		args = append(args, strconv.FormatUint(uint64(m), 8))
	}
	cmd.Path = exe
	cmd.Args = append(append(args, "--"), cmd.Args...)
	cmd.Env = append(cmd.Env, envStage+"=1")
	cmd.SysProcAttr.AmbientCaps = append(cmd.SysProcAttr.AmbientCaps, unix.CAP_SYS_ADMIN)
}
