package policy

import (
	"reflect"
	"strings"
	"testing"
)

// TestNarrowsKnowsEveryField: every field of Policy has a narrowing rule. A field
// without one is compared for equality (fail closed), but its author must say how
// it narrows: a field that can only grow or only shrink needs its own rule.
func TestNarrowsKnowsEveryField(t *testing.T) {
	ty := reflect.TypeFor[Policy]()
	for i := range ty.NumField() {
		if name := ty.Field(i).Name; narrowRule(name) == nil {
			t.Errorf("Policy.%s has no rule in narrowRule (policy/narrow.go): say how a repository's file may change it", name)
		}
	}
}

func base() *Policy {
	return &Policy{
		Repo: "/r", Home: "/h", Workdir: "/r", Backend: BackendNative, Command: []string{"sh"}, TmpSize: 1 << 30,
		Limits:          Limits{Memory: 2 << 30, Pids: 100},
		AllowNet:        []string{"a.test", "@npm"},
		Keep:            []Kept{{Path: "/h/.claude", Dir: true, From: "--keep-agent claude"}, {Path: "/h/.codex", Dir: true}},
		KeepReadOnly:    []string{"/h/.claude/plugins"},
		KeepPrivate:     []string{"/h/.codex/tmp"},
		KeepAgents:      []string{"claude", "codex"},
		Hide:            []Hidden{{Path: "/h/.aws", Dir: true, From: "--hide-secrets"}},
		GitConfigCopies: true,
		Sockets:         []Socket{{Path: "/run/s.sock", Bind: "/run/s"}},
		AddDirs:         []string{"/x"},
		SSHAgent:        "/tmp/ssh-x/agent.1",
		SSHKeys:         []string{"k1", "k2"},
		Devices:         []Device{{Path: "/dev/dri/renderD128", From: "--gpu"}, {Path: "/dev/kfd", From: "--gpu"}},
		HostPorts:       []PortMap{{Inside: 5432, Host: 5432}, {Inside: 6379, Host: 16379}},
		Publish:         []PortMap{{Inside: 8080, Host: 18080}},
	}
}

// TestNarrows: each dimension of the sandbox, narrowed and widened.
func TestNarrows(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(p *Policy)
		widens string // "" when the change narrows; else a word of the reason
	}{
		{"same", func(p *Policy) {}, ""},
		{"fewer hosts", func(p *Policy) { p.AllowNet = p.AllowNet[:1] }, ""},
		{"no host: no namespace", func(p *Policy) { p.AllowNet = nil }, "network namespace"},
		{"offline instead of the proxy", func(p *Policy) { p.AllowNet, p.Offline = nil, true }, ""},
		{"another host", func(p *Policy) { p.AllowNet = []string{"b.test"} }, "b.test"},
		{"fewer kept", func(p *Policy) {
			p.Keep, p.KeepReadOnly, p.KeepAgents = p.Keep[1:], nil, []string{"codex"}
		}, ""},
		{"kept read-only dropped while kept", func(p *Policy) { p.KeepReadOnly = nil }, "read-only"},
		{"kept private dropped while kept", func(p *Policy) { p.KeepPrivate = nil }, "private"},
		{"kept more", func(p *Policy) { p.Keep = append(p.Keep, Kept{Path: "/h/.ssh", Dir: true}) }, ".ssh"},
		{"kept created otherwise", func(p *Policy) { p.Keep[1].Create = true }, "otherwise"},
		{"agent added", func(p *Policy) { p.KeepAgents = append(p.KeepAgents, "x") }, "keep-agent"},
		{"hidden more", func(p *Policy) { p.Hide = append(p.Hide, Hidden{Path: "/h/.ssh/id"}) }, ""},
		{"hidden less", func(p *Policy) { p.Hide = nil }, "hidden"},
		{"Git configs with their credentials", func(p *Policy) { p.GitConfigCopies = false }, "credentials"},
		{"no device", func(p *Policy) { p.Devices = nil }, ""},
		{"fewer devices", func(p *Policy) { p.Devices = p.Devices[1:] }, ""},
		{"another device", func(p *Policy) { p.Devices = []Device{{Path: "/dev/fuse", From: "--device"}} }, "/dev/fuse"},
		{"read-only", func(p *Policy) { p.ReadOnly, p.AddDirs = true, nil }, ""},
		{"nested sandbox on", func(p *Policy) { p.NestedSandbox = true }, "--nested-sandbox"},
		{"no socket", func(p *Policy) { p.Sockets = nil }, ""},
		{"another socket", func(p *Policy) { p.Sockets = []Socket{{Path: "/run/s.sock", Bind: "/run/s.sock"}} }, "allow-socket"},
		{"no dir", func(p *Policy) { p.AddDirs = nil }, ""},
		{"another dir", func(p *Policy) { p.AddDirs = []string{"/y"} }, "add-dir"},
		{"no ssh agent", func(p *Policy) { p.SSHAgent, p.SSHKeys = "", nil }, ""},
		{"fewer ssh keys", func(p *Policy) { p.SSHKeys = p.SSHKeys[:1] }, ""},
		{"another ssh key", func(p *Policy) { p.SSHKeys = []string{"k3"} }, "k3"},
		{"every ssh key", func(p *Policy) { p.SSHKeys = nil }, "every SSH key"},
		{"another ssh agent", func(p *Policy) { p.SSHAgent = "/tmp/other" }, "another SSH agent"},
		{"fewer host ports", func(p *Policy) { p.HostPorts = p.HostPorts[1:] }, ""},
		{"another host port", func(p *Policy) { p.HostPorts[1].Host = 22 }, "host-port"},
		{"no publish", func(p *Policy) { p.Publish = nil }, ""},
		{"published elsewhere", func(p *Policy) { p.Publish[0].Host = 80 }, "publish"},
		{"smaller tmp budget", func(p *Policy) { p.TmpSize = 1 << 20 }, ""},
		{"larger tmp budget", func(p *Policy) { p.TmpSize = 2 << 30 }, "tmp-size"},
		{"no tmp budget", func(p *Policy) { p.TmpSize = 0 }, "tmp-size"},
		{"lower memory", func(p *Policy) { p.Limits.Memory = 1 << 30 }, ""},
		{"higher memory", func(p *Policy) { p.Limits.Memory = 4 << 30 }, "would raise --memory from 2G to 4G"},
		{"no memory limit", func(p *Policy) { p.Limits.Memory = 0 }, "would remove the --memory limit (2G)"},
		{"fewer pids", func(p *Policy) { p.Limits.Pids = 64 }, ""},
		{"more pids", func(p *Policy) { p.Limits.Pids = 1000 }, "would raise --pids from 100 to 1000"},
		{"no pids limit", func(p *Policy) { p.Limits.Pids = 0 }, "--pids"},
		{"a cpu limit where there was none", func(p *Policy) { p.Limits.MilliCPUs = 500 }, ""},
		{"everything lower", func(p *Policy) { p.Limits = Limits{Memory: 16 << 20, Pids: 8, MilliCPUs: 10} }, ""},
		{"backend", func(p *Policy) { p.Backend = BackendBwrap }, "Backend"},
		{"disk tmp", func(p *Policy) { p.DiskTmp = true }, "DiskTmp"},
		{"repo", func(p *Policy) { p.Repo = "/" }, "Repo"},
		{"command", func(p *Policy) { p.Command = []string{"evil"} }, "Command"},
	} {
		after := base()
		tc.change(after)
		err := Narrows(base(), after)
		switch {
		case tc.widens == "" && err != nil:
			t.Errorf("%s: refused a narrowing: %v", tc.name, err)
		case tc.widens != "" && (err == nil || !strings.Contains(err.Error(), tc.widens)):
			t.Errorf("%s: want a widening naming %q, got %v", tc.name, tc.widens, err)
		}
	}
	// The other way round: offline stays offline, read-only stays read-only.
	off := base()
	off.AllowNet, off.Offline = nil, true
	on := *off
	on.Offline, on.AllowNet = false, []string{"a.test"}
	if err := Narrows(off, &on); err == nil {
		t.Errorf("offline turned into the proxy's network: not refused")
	}
	noAgent := base()
	noAgent.SSHAgent, noAgent.SSHKeys = "", nil
	if err := Narrows(noAgent, base()); err == nil || !strings.Contains(err.Error(), "--ssh-agent") {
		t.Errorf("ssh agent added: %v", err)
	}
	ro := base()
	ro.ReadOnly, ro.AddDirs = true, nil
	rw := *ro
	rw.ReadOnly = false
	if err := Narrows(ro, &rw); err == nil || !strings.Contains(err.Error(), "writable") {
		t.Errorf("read-only turned off: %v", err)
	}
	nested := base()
	nested.NestedSandbox = true
	if err := Narrows(nested, base()); err != nil {
		t.Errorf("--nested-sandbox turned off: refused: %v", err)
	}
}
