package goinit

import (
	"testing"

	"github.com/agentbox/agentbox/mounts"
)

func TestSplitAddr(t *testing.T) {
	ip, port, err := splitAddr(mounts.ProxyAddr)
	if err != nil || ip != [4]byte{127, 0, 0, 1} || port != 3128 {
		t.Errorf("splitAddr(%s) = %v %d %v", mounts.ProxyAddr, ip, port, err)
	}
	for _, bad := range []string{"", "127.0.0.1", "127.0.0.1:0", "127.0.0.1:70000", "1.2.3:80", "1.2.3.256:80", "[::1]:80", "a.b.c.d:1"} {
		if _, _, err := splitAddr(bad); err == nil {
			t.Errorf("splitAddr(%q) accepted", bad)
		}
	}
}
