package vmtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/kmatrix/vmproto"
	"github.com/agentbox/agentbox/policy"
)

// TestGPU: --gpu hands the host's DRM render node in, which a program inside opens
// (and sees in sysfs, where Mesa looks it up); without --gpu the sandbox's /dev
// has no such node. A VM with a virtual GPU (kmatrix.Cell.GPU) must have one; a
// host without a GPU node refuses --gpu with exit 125, one line.
func TestGPU(t *testing.T) {
	nodes, _ := filepath.Glob("/dev/dri/renderD*")
	if os.Getenv(vmproto.EnvGPU) != "" && len(nodes) == 0 {
		t.Fatalf("a VM with a virtual GPU, and no render node in /dev/dri: was the %s module loaded?", "virtio_gpu")
	}
	if len(policy.GPUNodes()) == 0 {
		repo := testenv.Dir(t, "repo")
		out, errOut, code := run(t, repo, "exec", "--no-record", "--repo", repo, "--gpu", "--", "echo", "RAN")
		if code != 125 || strings.Contains(out, "RAN") || !strings.Contains(errOut, "no GPU device node") || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
			t.Errorf("--gpu on a host without a GPU: exit %d, stdout %q, stderr %q; want 125 and one line", code, out, errOut)
		}
		return
	}
	if len(nodes) == 0 {
		testenv.Skip(t, "this host's GPU has no DRM render node (%v)", policy.GPUNodes())
	}
	node := nodes[0]
	if f, err := os.OpenFile(node, os.O_RDWR, 0); err != nil {
		testenv.Skip(t, "the test user cannot open %s on the host: %v", node, err)
	} else {
		f.Close()
	}
	script := `exec 3<>` + node + ` && test -e /sys/class/drm/` + filepath.Base(node) + ` && echo opened`
	repo := testenv.Dir(t, "repo")
	exec := []string{"exec", "--no-record", "--repo", repo}
	if out, errOut, code := run(t, repo, append(exec, "--gpu", "--", "sh", "-c", script)...); code != 0 || out != "opened\n" {
		t.Errorf("with --gpu: exit %d, stdout %q, stderr %q; want %s opened inside", code, out, errOut, node)
	}
	if out, _, code := run(t, repo, append(exec, "--", "sh", "-c", script)...); code == 0 || strings.Contains(out, "opened") {
		t.Errorf("without --gpu: exit %d, stdout %q; want %s missing inside", code, out, node)
	}
}
