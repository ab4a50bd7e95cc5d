package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// maxInitBytes bounds what one of agentbox's own packages may allocate while it is
// initialised: every start of agentbox (each launch's CLI, the Go init) pays for it,
// whatever the command, so a table or map a package needs belongs in a switch or
// behind a sync.OnceValue instead. A few closures of sync.OnceValue fit.
const maxInitBytes = 128

// TestPackageInitsStayTrivial runs the shipped binary with the runtime's init trace
// and holds each of agentbox's packages to maxInitBytes (docs/performance.md, "What
// a launch no longer builds").
func TestPackageInitsStayTrivial(t *testing.T) {
	bin := testenv.Binary(t)
	cmd := exec.Command(bin, "--version")
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s --version: %v\n%s", bin, err, stderr.Bytes())
	}
	seen := 0
	sc := bufio.NewScanner(&stderr)
	for sc.Scan() {
		// init PKG @T ms, T ms clock, N bytes, M allocs
		f := strings.Fields(sc.Text())
		if len(f) < 10 || f[0] != "init" || f[8] != "bytes," {
			continue
		}
		seen++
		if !strings.HasPrefix(f[1], "github.com/agentbox/agentbox") {
			continue
		}
		n, err := strconv.Atoi(f[7])
		if err != nil {
			t.Fatalf("bad init trace line %q", sc.Text())
		}
		if n > maxInitBytes {
			t.Errorf("package %s allocates %d bytes in %s allocs while initialised (at most %d): build its tables at first use", f[1], n, f[9], maxInitBytes)
		}
	}
	if seen == 0 {
		t.Fatalf("no init trace from %s --version:\n%s", bin, stderr.Bytes())
	}
}
