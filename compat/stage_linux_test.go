package compat

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/sandboxtest"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/internal/ucounts"
	"github.com/agentbox/agentbox/mounts"
)

// TestStageThroughCLI runs `agentbox exec --backend bwrap --tmp-size 8M` as the
// unprivileged user with a bwrap stand-in that reports what it got from the stage:
// no capability in any set, no descriptor but stdio, the three of Run and the bind
// sources, and in its namespace the holder at StageDir with the copy of / and the
// budget's directories, each 8M, while no mount of the budget's root is left.
func TestStageThroughCLI(t *testing.T) {
	dir := testenv.Dir(t, "stage-bwrap")
	bin, report := filepath.Join(dir, "bwrap"), filepath.Join(dir, "report")
	script := "#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'bubblewrap 0.12.0'; exit 0; fi\n" +
		"exec >'" + report + "' 2>&1\n" +
		"printf 'argv'; printf ' %s' \"$@\"; echo\n" +
		"grep -E '^Cap(Inh|Prm|Eff|Amb)' /proc/$$/status\n" +
		// ls, not a loop with $(…), whose pipe would be the shell's own descriptor.
		"ls -l /proc/$$/fd >'" + report + ".fd'\n" +
		"echo \"holder $(ls " + StageDir + " | tr '\\n' ' ')\"\n" +
		"echo \"root $(ls -d " + stageRoot + "/etc)\"\n" +
		"echo \"size $(stat -f -c '%b %S' " + StageDir + "/1)\"\n" +
		"grep ' " + StageDir + "' /proc/$$/mountinfo | sed 's/^/mount /'\n" +
		"echo \"limit max_inotify_instances $(cat /proc/sys/user/max_inotify_instances)\"\n" +
		"echo \"limit rlimit_sigpending $(sed -n 's/^Max pending signals *\\([0-9]*\\) .*/\\1/p' /proc/$$/limits)\"\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	testenv.Chown(t, dir)
	b := sandboxtest.NewBox(t, "bwrap")
	cmd := b.Command(b.Repo, []string{"--tmp-size", "8M"}, "true")
	cmd.Env = append(cmd.Env, "AGENTBOX_BWRAP="+bin)
	sandboxtest.Run(cmd)
	data, err := os.ReadFile(report)
	if err != nil {
		t.Fatalf("the stand-in did not run: %v", err)
	}
	fds, err := os.ReadFile(report + ".fd")
	if err != nil {
		t.Fatal(err)
	}
	out := string(data)
	var argv []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		switch {
		case f[0] == "argv":
			argv = f[1:]
		case strings.HasPrefix(f[0], "Cap") && f[1] != "0000000000000000":
			t.Errorf("bwrap starts with capabilities: %s", line)
		}
	}
	// The descriptors bwrap may get: stdio, StatusFD, SeccompFD, ControlFD, one per
	// bind source named in its argv, and the stand-in's own (its script, its report).
	allowed := map[string]bool{"0": true, "1": true, "2": true, "3": true, "4": true, "5": true}
	for i, a := range argv {
		if (a == "--bind-fd" || a == "--ro-bind-fd") && i+1 < len(argv) {
			allowed[argv[i+1]] = true
		}
		if m := regexp.MustCompile(`^/proc/self/fd/(\d+)$`).FindStringSubmatch(a); m != nil {
			allowed[m[1]] = true
		}
	}
	for _, m := range regexp.MustCompile(`(?m) (\d+) -> (.*)$`).FindAllStringSubmatch(string(fds), -1) {
		if !allowed[m[1]] && !strings.HasPrefix(m[2], dir+"/") {
			t.Errorf("descriptor %s (%s) leaked to bwrap", m[1], m[2])
		}
	}
	if !strings.Contains(out, "root "+stageRoot+"/etc\n") {
		t.Errorf("no copy of / at %s:\n%s", stageRoot, out)
	}
	if data, _ := mounts.BudgetSplit(8 << 20); !strings.Contains(out, "size "+strconv.FormatInt(data/4096, 10)+" 4096\n") {
		t.Errorf("budget directory not the data of 8M (%d bytes):\n%s", data, out)
	}
	holder := strings.Fields(regexp.MustCompile(`(?m)^holder (.*)$`).FindStringSubmatch(out)[1])
	for _, want := range []string{"root", "0", "1", "2", "3"} {
		if !slices.Contains(holder, want) {
			t.Errorf("holder lacks %s: %q", want, holder)
		}
	}
	// The budget's directories are binds (root /N); its own root is detached.
	budgetDev := ""
	for _, m := range regexp.MustCompile(`(?m)^mount \S+ \S+ (\S+) (\S+) (\S+) `).FindAllStringSubmatch(out, -1) {
		if m[3] == StageDir+"/1" {
			budgetDev = m[1]
		}
	}
	for _, m := range regexp.MustCompile(`(?m)^mount \S+ \S+ (\S+) (\S+) (\S+) `).FindAllStringSubmatch(out, -1) {
		if m[1] == budgetDev && m[2] == "/" {
			t.Errorf("the budget's root is still mounted at %s:\n%s", m[3], out)
		}
	}
	if budgetDev == "" {
		t.Errorf("no budget directory mounted at %s/1:\n%s", StageDir, out)
	}
	// bwrap starts below the session's user limits: the stage wrote its
	// namespace's and lowered its own resource limits.
	limits, err := ucounts.Limits()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range limits {
		if l.Name == "max_inotify_instances" || l.Name == "rlimit_sigpending" {
			if want := fmt.Sprintf("limit %s %d\n", l.Name, l.Max); !strings.Contains(out, want) {
				t.Errorf("bwrap starts without the session's %s (%q):\n%s", l.Name, want, out)
			}
		}
	}
}
