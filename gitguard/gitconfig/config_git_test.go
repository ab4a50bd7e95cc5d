package gitconfig

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestParseMatchesGit parses tricky config files with Parse and with
// git config -f FILE --list (which reads only that file and runs nothing), and checks
// that where Git accepts a file, Parse reads the same names and values. The
// audit relies on this: a key read differently is a key the audit could miss.
func TestParseMatchesGit(t *testing.T) {
	cases := []string{
		"[core]fsmonitor=x\n",
		"[core \"Sub\"] Key = v\n",
		"[Core.SubX]\n\tkey = v\n",
		"[core]\n\tfs-monitor = a b   c  \n",
		"[core]\n\tk = \"a;b\" ; c\n",
		"[core]\n\tk = a\\\nb\n",
		"[core]\n\tk = a\"  \"b\n",
		"[core]\n\tk =\n",
		"[core]\n\tk\n",
		"[s \"a\\\"b\\\\c\\x\"]\n\tk = v\n",
		"[core]\n\tk = \\ta\\n\n",
		"[core]\n\tk = \"unterminated\n",
		"[core]\n\tk1 = a\n\tK1 = b\n",
		"[core]\n\tk = x\t# tab comment\n",
		"[ core ]\n\tk = v\n",
		"[core]\n\tk = a \\\n   b\n",
		"[core]\tk=v\n",
		"[core] ; comment\n\tk=v\n",
		"[core]\n\tk= \"  lead\"\n",
		"[core]\nk=v\n",
		" [core]\n\tk=v\n",
		"[core \"x\" ]\n\tk = v\n",
		emptySubsection,
		"[core]\n\tk= \\\"\n",
		"[core]\n\t9k = v\n",
		"[core]\r\n\tk = v\r\n\tj\r\n",
		"\xef\xbb\xbf[core]\n\tk = v\n",
		"[core]\n\tk = v\x00w\n",
		"[core]\n\tk = a\\bb\n",
		"[core]\n\tk = é\n",
		"[core]\n\tk#c\n",
		"[core]\n\tk = v\r\n",
		"[core]\n\tk = \"a\r\nb\"\n",
		"[a.b.c]\n\tk = v\n",
		"[a \"b\"]\n\tk = 1\n[a]\n\tk = 2\n",
		"[core]\n\tk = v\\\r\n w\n",
		"[core]\n\tk = \"x\"y\"z\"\n",
		"[core]\n\tk = ;\n",
		"[core]\n\tk = a\\\n",
		"[sec\"x\"]\n\tk = v\n",
		"[core]\n\tk\t=\tv\t\n",
		"[core]\n\tk = v\f\n",
		"[core]\n\tk\v= v\n",
		"[tig \"bind\"]\n\tgeneric = G\r!x\n",
		"[core]\n\tk = a\r\rb\r",
		"[core]\n\tk = \"a\rb\"\n",
		"[core]\n\tk =\r a\n",
		"[s \r\"x\"]\n\tk = v\n",
	}
	dir := t.TempDir()
	for i, c := range cases {
		file := filepath.Join(dir, "c")
		if err := os.WriteFile(file, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("git", "config", "-f", file, "--list", "-z")
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + dir, "GIT_CONFIG_NOSYSTEM=1"}
		out, gitErr := cmd.Output()
		entries, err := Parse(strings.NewReader(c))
		if gitErr != nil {
			if err == nil {
				t.Logf("case %d %q: Git refuses it, Parse accepts (harmless: Git reads nothing)", i, c)
			}
			continue
		}
		if err != nil {
			t.Errorf("case %d %q: Git accepts it, Parse says %v", i, c, err)
			continue
		}
		var got []string
		for _, e := range entries {
			s := e.Name()
			if !e.NoValue {
				s += "\n" + e.Value
			}
			got = append(got, s)
		}
		want := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
		if len(out) == 0 {
			want = nil
		}
		if c == emptySubsection {
			// Git names it core..k, a key no lookup of core.k finds; Parse
			// cannot tell it from [core] and so errs towards reporting it.
			continue
		}
		if strings.Join(got, "\x00") != strings.Join(want, "\x00") {
			t.Errorf("case %d %q:\n got %q\nwant %q", i, c, got, want)
		}
	}
}

const emptySubsection = "[core \"\"]\n\tk=v\n"
