package behaviour

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

var (
	sigTERM os.Signal = syscall.SIGTERM
	sigINT  os.Signal = syscall.SIGINT
	sigHUP  os.Signal = syscall.SIGHUP
	sigUSR1 os.Signal = syscall.SIGUSR1
	sigQUIT os.Signal = syscall.SIGQUIT
)

// startAndCollect starts cmd and delivers its result on res when it ends.
func startAndCollect(cmd *exec.Cmd, res chan<- result) error {
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		return err
	}
	go func() {
		err := cmd.Wait()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
			if code < 0 {
				code = 999
			}
		}
		res <- result{stdout: out.String(), stderr: errb.String(), code: code}
	}()
	return nil
}

// waitFor polls cond for up to 10 s: a bound against hangs, not a timing assertion.
func waitFor(cond func() bool) bool {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return cond()
}

func readFileOr(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// pgrep lists host PIDs whose argv[0] is name.
func pgrep(name string) []string {
	var pids []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if arg0, _, _ := strings.Cut(string(b), "\x00"); arg0 == name {
			pids = append(pids, e.Name())
		}
	}
	return pids
}
