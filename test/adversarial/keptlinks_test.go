package adversarial

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestKeptDirLinksOut: a plain kept directory (--keep, no agent's) is the session's
// to write, but a symlink it leaves there that leads out makes the operator's
// programs on the host write through it later: a tool appending to ~/.tool/log
// appends to ~/.bashrc, one unpacking into ~/.tool/src writes into HOME. After the
// audit no such link is left; the user's own link stays (one the session
// retargeted is put back), and so do a link inside and a venv-style link to a
// system binary. Every backend.
func TestKeptDirLinksOut(t *testing.T) {
	const script = `k=$HOME/.tool
		ln -s "$HOME/.bashrc" "$k/log"
		ln -s "$HOME" "$k/src"
		ln -s ../.config/autostart/x.desktop "$k/dangle"
		mkdir -p "$k/deep/er" && ln -s ../../../.profile "$k/deep/er/rc"
		ln -s inside "$k/in"
		ln -s /usr/bin/env "$k/python"
		rm "$k/own" && ln -s "$HOME/.ssh" "$k/own"
		echo DONE`
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			x := newTarget(t, backend)
			k := filepath.Join(x.Home, ".tool")
			mkUserDir(t, filepath.Join(x.Home, "dotfiles"))
			mkUserDir(t, k)
			sandboxtest.WriteFile(t, filepath.Join(k, "inside"), "x\n")
			sandboxtest.WriteFile(t, filepath.Join(x.Home, ".bashrc"), "# the user's\n")
			if err := os.Symlink("../dotfiles", filepath.Join(k, "own")); err != nil {
				t.Fatal(err)
			}
			for _, p := range []string{k, filepath.Join(x.Home, ".bashrc")} {
				testenv.Chown(t, p)
			}
			r := sandboxtest.Run(x.Agentbox(x.Repo, "exec", "--backend", backend, "--no-git-save", "--keep", k, "--", "/bin/sh", "-c", script))
			if !strings.Contains(r.Stdout, "DONE") {
				t.Fatalf("the session did not run:\n%s", r)
			}
			for _, name := range []string{"log", "src", "dangle", "deep/er/rc"} {
				if l, err := os.Readlink(filepath.Join(k, name)); err == nil {
					t.Errorf("%s -> %s left in the kept directory: the operator's programs would write through it", name, l)
				}
			}
			for name, want := range map[string]string{"own": "../dotfiles", "in": "inside", "python": "/usr/bin/env"} {
				if l, err := os.Readlink(filepath.Join(k, name)); err != nil || l != want {
					t.Errorf("%s -> %q (%v), want the link to %s", name, l, err, want)
				}
			}
			if n := strings.Count(r.Stderr, "leads out of the kept path"); n != 5 {
				t.Errorf("%d findings, want one per link out (5)", n)
			}
			if r.Code != 0 {
				t.Errorf("exit %d: every link out was moved aside", r.Code)
			}
			if t.Failed() {
				t.Logf("session:\n%s", r)
			}
		})
	}
}
