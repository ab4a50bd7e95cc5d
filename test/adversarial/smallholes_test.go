package adversarial

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/sandboxtest"
	"github.com/agentbox/agentbox/internal/testenv"
)

// The smaller holes of issue 14 §6 that are attacks from inside a session: each row
// runs through TestEscapes on both backends, and checks the host afterwards.
func init() { attacks = append(attacks, smallHoleAttacks...) }

var smallHoleAttacks = []attack{
	// The launcher runs bwrap (with the whole sandbox's argv) and the recorder runs
	// git, on the host, as the operator. A PATH naming a directory in the repository
	// (direnv's PATH_add bin, node_modules/.bin) or a relative entry must not make it
	// run what the sandbox wrote there.
	{name: "program planted on the operator's PATH inside the repo", script: `
		mkdir -p bin
		for p in bin/bwrap bwrap bin/git git; do
			printf '#!/bin/sh\ntouch "%s/%s"\nexit 1\n' "$PWNED" "$(echo "$p" | tr / -)" > "$p"
			chmod +x "$p"
		done
		echo DONE`,
		check: func(t *testing.T, x *target, r sandboxtest.Result) {
			bwrapDir := filepath.Dir(sandboxtest.BwrapPath(t))
			if bwrapDir == "." {
				t.Fatal("no bubblewrap 0.12.0 to put on PATH (run scripts/setup-test-env.sh)")
			}
			path := strings.Join([]string{filepath.Join(x.Repo, "bin"), ".", "", bwrapDir, "/usr/local/bin:/usr/bin:/bin"}, ":")
			for _, args := range [][]string{
				{"exec", "--backend", "bwrap", "--no-git-save", "--", "/bin/true"},
				{"exec", "--backend", "bwrap", "--dry-run", "--", "/bin/true"},
				{"doctor"},
			} {
				cmd := testenv.Command(t, x.Home, x.Bin, args...)
				cmd.Dir = x.Repo
				cmd.Env = append(withoutEnv(cmd.Env, "PATH", "AGENTBOX_BWRAP"), "PATH="+path)
				res := sandboxtest.Run(cmd)
				if args[0] == "exec" && res.Code != 0 {
					t.Errorf("agentbox %s with the repository on PATH: want the real bwrap found further down:\n%s", args, res)
				}
			}
			if ents, _ := os.ReadDir(x.Pwned); len(ents) > 0 {
				var names []string
				for _, e := range ents {
					names = append(names, e.Name())
				}
				t.Errorf("agentbox ran programs the sandbox planted on PATH, on the host: %v", names)
			}
		}},
}

// withoutEnv drops the variables named from env.
func withoutEnv(env []string, names ...string) []string {
	var out []string
	for _, kv := range env {
		keep := true
		for _, n := range names {
			keep = keep && !strings.HasPrefix(kv, n+"=")
		}
		if keep {
			out = append(out, kv)
		}
	}
	return out
}

// hostileTmp leaves in /tmp what a sandbox can make that plain removal chokes on:
// directories with mode 000, without x, read-only; a FIFO; nesting deeper than
// PATH_MAX; symlinks to a host directory and to the victim. Then it touches ready.
const hostileTmp = `set -e
	mkdir -p /tmp/locked/inner /tmp/noexec/inner /tmp/readonly/inner /tmp/fifo
	for d in locked/inner noexec/inner readonly/inner fifo; do echo x > /tmp/$d/file; chmod 000 /tmp/$d/file; done
	mkfifo /tmp/fifo/pipe
	ln -s "$OUTSIDE" /tmp/locked/inner/out; ln -s "$VICTIM" /tmp/victim-link
	perl -e 'chdir "/tmp" or die; for (1..200) { mkdir "d" x 100 or die; chdir "d" x 100 or die } mkdir "bottom", 0 or die'
	chmod 000 /tmp/locked/inner /tmp/locked; chmod 600 /tmp/noexec; chmod 500 /tmp/readonly; chmod 300 /tmp/fifo
	echo HOSTILE
`

// TestDiskTmpHostileLeftovers: whatever the command leaves in a --disk-tmp /tmp is
// gone when the session ends (P10), and when the launcher was killed, agentbox gc
// removes it and succeeds; nothing a symlink there points at changes.
func TestDiskTmpHostileLeftovers(t *testing.T) {
	for _, backend := range sandboxtest.Backends(t) {
		t.Run(backend, func(t *testing.T) {
			x := newTarget(t, backend)
			before := x.snapshot(t)
			flags := []string{"--disk-tmp", "--no-git-save", "--no-record"}
			cmd := x.Command(x.Repo, flags, hostileTmp)
			cmd.Env = append(cmd.Env, "OUTSIDE="+x.Outside, "VICTIM="+x.Victim)
			r := sandboxtest.Run(cmd)
			if r.Code != 0 || !strings.Contains(r.Stdout, "HOSTILE") {
				t.Fatalf("session: %s", r)
			}
			if d := diskTmpDirs(x.Home); len(d) != 0 {
				t.Errorf("--disk-tmp dir left after the session: %v\n%s", d, r)
			}

			// The launcher killed: the dir stays for gc, which must remove it.
			left := len(diskTmpDirs(x.Home))
			cmd = x.Command(x.Repo, flags, hostileTmp+`touch "$REPO/ready"; sleep 300`)
			cmd.Env = append(cmd.Env, "OUTSIDE="+x.Outside, "VICTIM="+x.Victim)
			res := make(chan sandboxtest.Result, 1)
			if err := sandboxtest.StartAndCollect(cmd, res); err != nil {
				t.Fatal(err)
			}
			if !sandboxtest.WaitFor(func() bool { return sandboxtest.Exists(filepath.Join(x.Repo, "ready")) }) {
				_ = cmd.Process.Kill()
				t.Fatalf("session never got ready: %s", <-res)
			}
			_ = cmd.Process.Kill()
			<-res
			if d := diskTmpDirs(x.Home); len(d) != left+1 {
				t.Fatalf("the killed launcher's --disk-tmp dir: %v (nothing for gc to test)", d)
			}
			g := gc(t, x.Box)
			if g.Code != 0 {
				t.Errorf("agentbox gc failed on a hostile leftover: %s", g)
			}
			if d := diskTmpDirs(x.Home); len(d) != 0 {
				t.Errorf("gc left %v\n%s", d, g)
			}
			x.unchanged(t, before)
		})
	}
}
