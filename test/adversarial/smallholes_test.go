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
