package behaviour

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestInstallExtras: what scripts/install.sh installs beyond the binary works as a
// user meets it (issue 35.13): it says when bash-completion, which loads its
// completion file, is missing; the bash completion offers the values of
// --keep-agent, --backend, --allow-net and --profile (the config file's profiles);
// the manual renders without warnings in the C locale.
func TestInstallExtras(t *testing.T) {
	prefix := testenv.Dir(t, "prefix")
	cmd := exec.Command("sh", filepath.Join(testenv.ModuleRoot(), "scripts", "install.sh"))
	cmd.Env = append(os.Environ(), "PREFIX="+prefix)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("install.sh: %v\n%s", err, out)
	}
	_, statErr := os.Stat("/usr/share/bash-completion/bash_completion")
	if said := strings.Contains(string(out), "the bash-completion package is not installed"); said != (statErr != nil) {
		t.Errorf("install.sh with bash-completion installed=%v:\n%s", statErr == nil, out)
	}

	cfg := testenv.Dir(t, "xdg")
	if err := os.MkdirAll(filepath.Join(cfg, "agentbox"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(cfg, "agentbox", "config.toml"), "[profile.work]\noffline = true\n[profile.review]\nread-only = true\n")
	complete := func(words ...string) string {
		script := `. "$1"; shift; COMP_WORDS=(agentbox "$@"); COMP_CWORD=$#; _agentbox; echo "${COMPREPLY[*]}"`
		c := exec.Command("bash", append([]string{"-c", script, "bash", filepath.Join(prefix, "share/bash-completion/completions/agentbox")}, words...)...)
		c.Env = append(os.Environ(), "PATH="+filepath.Join(prefix, "bin")+":/usr/bin:/bin", "XDG_CONFIG_HOME="+cfg)
		o, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("completing %q: %v\n%s", words, err, o)
		}
		return strings.TrimSpace(string(o))
	}
	for _, c := range []struct {
		words []string
		want  string
	}{
		{[]string{"exec", "--keep-agent", ""}, "claude codex"},
		{[]string{"exec", "--backend", ""}, "native bwrap auto"},
		{[]string{"exec", "--allow-net", "@c"}, "@claude @codex @crates"},
		{[]string{"exec", "--profile", ""}, "review work"},
	} {
		if got := complete(c.words...); got != c.want {
			t.Errorf("completing %q: %q, want %q", c.words, got, c.want)
		}
	}

	if _, err := exec.LookPath("man"); err != nil {
		testenv.Skip(t, "man is not installed: %v", err)
	}
	m := exec.Command("man", "--warnings", "-l", filepath.Join(prefix, "share/man/man1/agentbox.1"))
	m.Env = append(os.Environ(), "LC_ALL=C", "MANPAGER=cat", "PAGER=cat")
	var stderr strings.Builder
	m.Stderr = &stderr
	if err := m.Run(); err != nil || stderr.Len() > 0 {
		t.Errorf("LC_ALL=C man --warnings -l agentbox.1: %v\n%s", err, stderr.String())
	}
}
