package hostaudit

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/agentbox/agentbox/internal/widen"
	"github.com/agentbox/agentbox/policy"
)

// TestNextLaunchRestoresKilledWiden: a launcher killed (SIGKILL) after its audit
// widened a 0000 directory of the repository, before it put the mode back,
// leaves the mode journaled in the state dir; the next launch (Orphans, its
// first step) puts it back. The helper process is the killed launcher's audit:
// the same Relaxer with the same journal, stopped between widen and restore.
func TestNextLaunchRestoresKilledWiden(t *testing.T) {
	if os.Getenv("HOSTAUDIT_WIDEN_HELPER") != "" {
		r := &widen.Relaxer{Roots: []string{os.Getenv("REPO")}, Journal: WidenJournal(os.Getenv("STATE"))}
		if !r.Widen(os.Getenv("DIR")) {
			os.Exit(3)
		}
		os.Stdout.WriteString("widened\n")
		select {} // until killed
	}
	repo, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	dir := filepath.Join(repo, "wo")
	if err := os.Mkdir(dir, 0); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(dir, 0o700)
	cmd := exec.Command(os.Args[0], "-test.run=^TestNextLaunchRestoresKilledWiden$")
	cmd.Env = append(os.Environ(), "HOSTAUDIT_WIDEN_HELPER=1", "REPO="+repo, "STATE="+state, "DIR="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "widened\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("helper: %q", line)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if fi, _ := os.Lstat(dir); fi.Mode().Perm() != 0o500 {
		t.Fatalf("the killed audit left %o, want its widened 500", fi.Mode().Perm())
	}
	var stderr bytes.Buffer
	Orphans(&Config{Stderr: &stderr}, &policy.Policy{Repo: repo, StateDir: state})
	if fi, _ := os.Lstat(dir); fi.Mode().Perm() != 0 {
		t.Errorf("after the next launch's Orphans %s is %o, want 0 back", dir, fi.Mode().Perm())
	}
}
