package policy

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/agentbox/agentbox/internal/bytesize"
)

// A repository's own file (config.RepoFile) is written by the sandbox, so it may
// only narrow the user's policy. Whether it did is judged here, on the sandbox each
// policy describes rather than on the keys of the file: an empty --allow-net list is
// "no proxy, the host's network", not "fewer hosts". Every field of Policy has a
// rule (narrowRule); a field without one must be equal, so a field added later is
// refused until someone says how it narrows.

// Widening is what makes one policy wider than another: the field and why.
type Widening struct {
	Field  string // the Policy field, e.g. "AllowNet"
	Reason string
}

func (w *Widening) Error() string { return w.Reason }

// fieldRule compares one field of two policies; "" means after is within before.
type fieldRule func(before, after *Policy) string

// Narrows returns nil when every part of after is contained in before: namespaces
// and covers before are still there, writable paths, sockets, kept paths and
// allowed hosts are subsets, offline stays offline, read-only stays read-only.
func Narrows(before, after *Policy) error {
	t := reflect.TypeFor[Policy]()
	bv, av := reflect.ValueOf(before).Elem(), reflect.ValueOf(after).Elem()
	for i := range t.NumField() {
		name := t.Field(i).Name
		rule := narrowRule(name)
		var why string
		if rule != nil {
			why = rule(before, after)
		} else if b, a := bv.Field(i), av.Field(i); !b.CanInterface() && !(b.IsZero() && a.IsZero()) ||
			b.CanInterface() && !reflect.DeepEqual(b.Interface(), a.Interface()) {
			why = name + " changed, and agentbox does not know how it narrows"
		}
		if why != "" {
			return &Widening{Field: name, Reason: why}
		}
	}
	return nil
}

// narrowRule is the rule for the Policy field name; nil for a field it does not know.
func narrowRule(name string) fieldRule {
	switch name {
	case "Repo", "Home", "Workdir", "DiskTmp", "Backend", "CacheDir", "StateDir", "ConfigDir", "Command":
		return equal(name)
	case "TmpSize":
		return narrowTmpSize
	case "Limits":
		return narrowLimits
	case "Offline":
		return narrowOffline
	case "AllowNet":
		return narrowNet
	case "Keep":
		return narrowKeep
	case "KeepReadOnly":
		return coversStay("a kept agent's read-only directory", func(p *Policy) []string { return p.KeepReadOnly })
	case "KeepPrivate":
		return coversStay("a kept agent's private directory", func(p *Policy) []string { return p.KeepPrivate })
	case "KeepAgents":
		return subset("keep-agent", func(p *Policy) []string { return p.KeepAgents })
	case "Hide":
		return narrowHide
	case "GitConfigCopies":
		return func(b, a *Policy) string {
			if b.GitConfigCopies && !a.GitConfigCopies {
				return "would show the repository's Git configs with their credentials (--hide-secrets)"
			}
			return ""
		}
	case "Startup":
		return narrowStartup
	case "ReadOnly":
		return narrowReadOnly
	case "NestedSandbox":
		return narrowNestedSandbox
	case "Sockets":
		return subset("allow-socket", func(p *Policy) []string {
			var out []string
			for _, s := range p.Sockets {
				out = append(out, s.Path+"\x00"+s.Bind)
			}
			return out
		})
	case "AddDirs":
		return subset("add-dir", func(p *Policy) []string { return p.AddDirs })
	case "Env":
		return narrowEnv
	case "Devices":
		return subset("device", func(p *Policy) []string {
			var out []string
			for _, d := range p.Devices {
				out = append(out, d.Path)
			}
			return out
		})
	case "SSHAgent":
		return narrowSSHAgent
	case "SSHKeys":
		return narrowSSHKeys
	case "HostPorts":
		return narrowPorts("host-port", func(p *Policy) []PortMap { return p.HostPorts })
	case "Publish":
		return narrowPorts("publish", func(p *Policy) []PortMap { return p.Publish })
	}
	return nil
}

func equal(name string) fieldRule {
	return func(b, a *Policy) string {
		bv := reflect.ValueOf(b).Elem().FieldByName(name).Interface()
		av := reflect.ValueOf(a).Elem().FieldByName(name).Interface()
		if reflect.DeepEqual(bv, av) {
			return ""
		}
		return fmt.Sprintf("would change %s (from %v to %v)", name, bv, av)
	}
}

func netMode(p *Policy) string {
	switch {
	case p.Offline:
		return "offline"
	case len(p.AllowNet) > 0:
		return "proxy"
	}
	return "host"
}

// narrowTmpSize: the RAM-backed filesystems' budget may only shrink; zero would be
// no budget at all.
func narrowTmpSize(b, a *Policy) string {
	if a.TmpSize > b.TmpSize || a.TmpSize <= 0 && b.TmpSize > 0 {
		return fmt.Sprintf("would raise --tmp-size from %s to %s", bytesize.Format(b.TmpSize), bytesize.Format(a.TmpSize))
	}
	return ""
}

// narrowLimits: each of --memory, --pids and --cpus may only be lowered, or set
// where the user's policy has none; taking one away is no limit at all.
func narrowLimits(b, a *Policy) string {
	for _, l := range []struct {
		flag   string
		b, a   int64
		format func(int64) string
	}{
		{"--memory", b.Limits.Memory, a.Limits.Memory, bytesize.Format},
		{"--pids", b.Limits.Pids, a.Limits.Pids, func(n int64) string { return fmt.Sprint(n) }},
		{"--cpus", b.Limits.MilliCPUs, a.Limits.MilliCPUs, FormatCPUs},
	} {
		switch {
		case LimitOrder(l.a) <= LimitOrder(l.b):
		case l.a <= 0:
			return fmt.Sprintf("would remove the %s limit (%s)", l.flag, l.format(l.b))
		default:
			return fmt.Sprintf("would raise %s from %s to %s", l.flag, l.format(l.b), l.format(l.a))
		}
	}
	return ""
}

func narrowOffline(b, a *Policy) string {
	if b.Offline && !a.Offline {
		return "would turn offline off"
	}
	return ""
}

// narrowNet: a network namespace stays; hosts allowed through the proxy may only
// shrink, and never to nothing, which means no namespace at all.
func narrowNet(b, a *Policy) string {
	bm, am := netMode(b), netMode(a)
	switch {
	case bm == am && am != "proxy", bm == "host", am == "offline":
		return ""
	case am == "host":
		return "would remove the sandbox's network namespace (with no host allowed, there is no proxy: the host's network, its loopback services and the LAN would be reachable); to cut the network, write offline = true"
	case bm == "offline":
		return "would turn offline into the proxy's network"
	}
	for _, h := range a.AllowNet {
		if !slices.Contains(b.AllowNet, h) {
			return "would allow " + quote(h) + ", which the user's policy does not"
		}
	}
	return ""
}

func narrowReadOnly(b, a *Policy) string {
	if b.ReadOnly && !a.ReadOnly {
		return "would make the repository writable"
	}
	return ""
}

// narrowNestedSandbox: a repository's file may turn --nested-sandbox off, never on:
// on Linux 7.1+ it trades Landlock's deny-by-default of host path sockets for
// masks that miss the sockets bound after the launch.
func narrowNestedSandbox(b, a *Policy) string {
	if a.NestedSandbox && !b.NestedSandbox {
		return "would turn --nested-sandbox on (host path sockets masked at launch instead of denied by Landlock: those bound later become reachable)"
	}
	return ""
}

func narrowKeep(b, a *Policy) string {
	for _, k := range a.Keep {
		i := slices.IndexFunc(b.Keep, func(o Kept) bool { return o.Path == k.Path })
		if i < 0 {
			return "would keep " + quote(k.Path) + ", which the user's policy does not"
		}
		if o := b.Keep[i]; o.Dir != k.Dir || o.Create != k.Create || o.Init != k.Init {
			return "would keep " + quote(k.Path) + " otherwise than the user's policy"
		}
	}
	return ""
}

// coversStay: a directory bound read-only or private inside a kept path stays so
// while it is still inside a kept path (outside one, the HOME overlay covers it).
func coversStay(what string, list func(*Policy) []string) fieldRule {
	return func(b, a *Policy) string {
		for _, d := range list(b) {
			if a.inKept(d) && !slices.Contains(list(a), d) {
				return "would leave " + what + " writable: " + quote(d)
			}
		}
		return ""
	}
}

func narrowHide(b, a *Policy) string {
	for _, h := range b.Hide {
		if !slices.ContainsFunc(a.Hide, func(o Hidden) bool { return o.Path == h.Path && o.Dir == h.Dir }) {
			return "would show the hidden path " + quote(h.Path)
		}
	}
	return ""
}

func subset(flag string, list func(*Policy) []string) fieldRule {
	return func(b, a *Policy) string {
		for _, v := range list(a) {
			if !slices.Contains(list(b), v) {
				v, _, _ = strings.Cut(v, "\x00")
				return "would add " + quote(v) + " to --" + flag + ", which the user's policy does not have"
			}
		}
		return ""
	}
}

// narrowSSHAgent: the filtered SSH agent may only go away.
func narrowSSHAgent(b, a *Policy) string {
	switch {
	case a.SSHAgent == "" || a.SSHAgent == b.SSHAgent:
		return ""
	case b.SSHAgent == "":
		return "would hand the sandbox the user's SSH agent (--ssh-agent)"
	}
	return "would forward to another SSH agent"
}

// narrowSSHKeys: with the agent on, the keys let through may only shrink; no
// --ssh-key means every key, so the user's empty list holds any other.
func narrowSSHKeys(b, a *Policy) string {
	if a.SSHAgent == "" || len(b.SSHKeys) == 0 {
		return ""
	}
	if len(a.SSHKeys) == 0 {
		return "would let every SSH key through, where the user's policy names some (--ssh-key)"
	}
	for _, k := range a.SSHKeys {
		if !slices.Contains(b.SSHKeys, k) {
			return "would let SSH key " + quote(k) + " through, which the user's policy does not"
		}
	}
	return ""
}

// narrowStartup: a start-up file read-only before stays so, unless the grant that
// held it is no longer writable or it is hidden now.
func narrowStartup(b, a *Policy) string {
	for _, f := range b.Startup {
		writable := slices.ContainsFunc(a.Grants(), func(g Grant) bool { return g.Path == f.Grant })
		if writable && !hiddenAt(a, f.Path) && !slices.ContainsFunc(a.Startup, func(o StartupFile) bool { return o.Path == f.Path }) {
			return "would leave the start-up file " + quote(f.Path) + " writable"
		}
	}
	return ""
}
