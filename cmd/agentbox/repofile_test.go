package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/config"
	"github.com/agentbox/agentbox/internal/hostpath"
	"github.com/agentbox/agentbox/mounts"
	"github.com/agentbox/agentbox/mounts/build"
	"github.com/agentbox/agentbox/netproxy"
	"github.com/agentbox/agentbox/policy"
)

// repoFixture is a HOME with the agents' directories, a secret, a repository, a
// further directory and a socket, and the user command lines the fuzz target
// narrows. HOME may not lie below /tmp, where t.TempDir usually is.
type repoFixture struct {
	home, repo string
	users      [][]string
	vocab      []string // eight values the user lines and synthFile use
}

func newRepoFixture(tb testing.TB) *repoFixture {
	tb.Helper()
	root, err := os.MkdirTemp("/var/tmp", "agentbox-repofile-test-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(root) })
	root, _ = filepath.EvalSymlinks(root)
	x := &repoFixture{home: filepath.Join(root, "home")}
	x.repo = filepath.Join(x.home, "repo")
	for _, d := range []string{"repo/.git", "repo/src", ".claude/plugins", ".codex/tmp", ".aws", "notes", "../extra", "../sock"} {
		if err := os.MkdirAll(filepath.Join(x.home, d), 0o755); err != nil {
			tb.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(x.home, ".claude.json"), []byte("{}\n"), 0o600); err != nil {
		tb.Fatal(err)
	}
	sock := filepath.Join(root, "sock", "s.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { l.Close() })
	extra := filepath.Join(root, "extra")
	x.vocab = []string{"a.test", "@npm", "10.0.0.0/8", "~/notes", extra, sock, "claude", "codex"}
	x.users = [][]string{
		{"--allow-net", "a.test", "--allow-net", "@npm", "--keep-agent", "claude", "--keep-agent", "codex",
			"--keep", "~/notes", "--add-dir", extra, "--allow-socket", sock, "--allow-git-push", "--nested-sandbox"},
		{"--offline", "--read-only", "--keep-agent", "claude", "--hide-secrets", "--hide", "~/notes"},
		{},
		{"--allow-net", "10.0.0.0/8", "--hide-secrets", "--keep-agent", "codex", "--add-dir", extra},
	}
	return x
}

// args returns user command line n, laid onto exec's flags as cmdExec does.
func (x *repoFixture) args(tb testing.TB, n int) (*execArgs, *flag.FlagSet, map[string]string, *policy.Policy) {
	tb.Helper()
	var cl execArgs
	clFlags := cl.flags()
	user := x.users[n%len(x.users)]
	if err := clFlags.Parse(user); err != nil {
		tb.Fatal(err)
	}
	a, fs, prov, err := layered(user, clFlags, "")
	if err != nil {
		tb.Fatal(err)
	}
	a.opts.Cwd, a.opts.Home = x.repo, x.home
	narrowerWins(&a.opts, prov)
	pol, err := policy.New(a.opts)
	if err != nil {
		tb.Fatalf("user command line %q: %v", user, err)
	}
	return a, fs, prov, pol
}

// FuzzRepoFile: no repository file, whatever it says, removes a namespace, a cover
// or a refusal. The oracle is the mount plan each policy makes, not the rules of
// policy.Narrows: the network namespace stays, the proxy allows no rule it did not,
// no path becomes writable on the host or loses its hiding, and the push guard,
// snapshot and record stay as they were.
func FuzzRepoFile(f *testing.F) {
	for _, seed := range []string{
		"allow-net = []\n", "offline = true\n", "allow-net = []\noffline = true\n",
		"keep-agent = [\"codex\"]\n", "keep-agent = []\nkeep = []\n", "allow-net = [\"@npm\", \"b.test\"]\n",
		"read-only = true\n", "read-only = true\nadd-dir = []\n", "hide = [\"~/.claude\"]\n",
		"hide-secrets = true\n", "allow-git-push = false\n", "allow-socket = []\nadd-dir = []\n",
		"offline = false\n", "backend = \"bwrap\"\n", "no-git-save = true\n", "[profile.x]\noffline = true\n",
		"default-profile = \"x\"\n", "tmp-size = \"1M\"\n", "tmp-size = \"64G\"\n", "tmp-size = 4096\n", "nested-sandbox = false\n", "nested-sandbox = true\n", "hide = [\"/etc\"]\nkeep = [\"~/notes\", \"~/.ssh\"]\n",
	} {
		for n := range 4 {
			f.Add(uint8(n), []byte(seed))
		}
	}
	x := newRepoFixture(f)
	for _, v := range []string{"XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME"} {
		f.Setenv(v, "")
	}
	f.Setenv("HOME", x.home)
	f.Fuzz(func(t *testing.T, user uint8, data []byte) {
		// The bytes as a file, and as settings made from them (synthFile): most
		// mutations of a file are no longer TOML.
		for _, text := range [][]byte{data, x.synthFile(data)} {
			rf, err := config.Parse(filepath.Join(x.repo, config.RepoFile), text)
			if err != nil {
				continue // refused at launch
			}
			x.check(t, int(user), rf)
		}
	})
}

// check lays rf over user command line n and fails unless it is refused, naming
// the file, or the session it makes is within the one without it.
func (x *repoFixture) check(t *testing.T, n int, rf *config.File) {
	a, fs, prov, before := x.args(t, n)
	cfgBefore := a.cfg
	after, _, err := narrowBy(a, fs, prov, before, rf)
	if err != nil {
		if !strings.Contains(err.Error(), rf.Path) {
			t.Fatalf("a refusal that does not name the file: %v", err)
		}
		return
	}
	checkContained(t, before, after)
	if a.cfg.AllowGitPush && !cfgBefore.AllowGitPush {
		t.Fatalf("the push guard went off")
	}
	if !reflect.DeepEqual(a.cfg.GitSave, cfgBefore.GitSave) || a.cfg.NoRecord != cfgBefore.NoRecord {
		t.Fatalf("the snapshot or the record changed: %+v -> %+v", cfgBefore, a.cfg)
	}
}

// synthFile makes a repository file from data, two bytes a setting: which of exec's
// flags, and its value (a boolean, one of a few words, or a list: the vocabulary's
// words whose bits are set).
func (x *repoFixture) synthFile(data []byte) []byte {
	var names []string
	new(execArgs).flags().VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	seen := map[string]bool{}
	var b strings.Builder
	for i := 0; i+1 < len(data); i += 2 {
		name := names[int(data[i])%len(names)]
		if seen[name] {
			continue
		}
		seen[name] = true
		v := data[i+1]
		if bf, ok := new(execArgs).flags().Lookup(name).Value.(interface{ IsBoolFlag() bool }); ok && bf.IsBoolFlag() {
			fmt.Fprintf(&b, "%s = %v\n", name, v&1 == 1)
			continue
		}
		if _, isList := new(execArgs).flags().Lookup(name).Value.(interface{ Values() []string }); !isList {
			scalars := []string{"1M", "64G", "0", "bwrap", "auto", "/", "3", x.repo}
			fmt.Fprintf(&b, "%s = %q\n", name, scalars[int(v)%len(scalars)])
			continue
		}
		var words []string
		for bit, w := range x.vocab {
			if v&(1<<bit) != 0 {
				words = append(words, strconv.Quote(w))
			}
		}
		fmt.Fprintf(&b, "%s = [%s]\n", name, strings.Join(words, ", "))
	}
	return []byte(b.String())
}

// checkContained fails unless after's plan is within before's.
func checkContained(t *testing.T, before, after *policy.Policy) {
	t.Helper()
	s := mounts.Session{Empty: mounts.EmptySources{Dir: "/EMPTY-DIR", File: "/EMPTY-FILE"}}
	pb, pa := build.Plan(before, s), build.Plan(after, s)
	if pb.Namespaces.Net && !pa.Namespaces.Net {
		t.Fatalf("the network namespace is gone: allow-net %q -> %q, offline %v -> %v", before.AllowNet, after.AllowNet, before.Offline, after.Offline)
	}
	if pa.Proxy != "" {
		if pb.Namespaces.Net && pb.Proxy == "" {
			t.Fatalf("offline became the proxy's network")
		}
		rb, _ := netproxy.ParseAll(before.AllowNet)
		ra, _ := netproxy.ParseAll(after.AllowNet)
		for _, r := range ra {
			if pb.Proxy != "" && !slices.ContainsFunc(rb, func(o netproxy.Rule) bool { return reflect.DeepEqual(o, r) }) {
				t.Fatalf("the proxy allows %+v, which it did not", r)
			}
		}
	}
	if after.NestedSandbox && !before.NestedSandbox {
		t.Fatalf("--nested-sandbox went on: Landlock's deny of host path sockets gone on Linux 7.1+")
	}
	if pa.TmpSize > pb.TmpSize || pa.TmpSize == 0 && pb.TmpSize != 0 {
		t.Fatalf("the tmp budget grew: %d -> %d", pb.TmpSize, pa.TmpSize)
	}
	if !slices.Equal(pb.Command, pa.Command) || pb.Workdir != pa.Workdir {
		t.Fatalf("the command or its directory changed")
	}
	var probes []string
	for _, op := range slices.Concat(pb.Ops, pa.Ops) {
		probes = append(probes, op.Dest, filepath.Join(op.Dest, "probe"))
	}
	for _, p := range probes {
		if writable(pa, p) && !writable(pb, p) {
			t.Fatalf("%s became writable on the host", p)
		}
		if hidden(pb, before, p) && !hidden(pa, before, p) {
			t.Fatalf("%s is no longer hidden", p)
		}
	}
}

// governing is the last operation whose destination is path or holds it.
func governing(plan mounts.Plan, path string) mounts.Op {
	var g mounts.Op
	for _, op := range plan.Ops {
		if hostpath.Within(path, op.Dest) {
			g = op
		}
	}
	return g
}

func writable(plan mounts.Plan, path string) bool {
	return governing(plan, path).Kind == mounts.Bind
}

// hidden: the host's content at path is out of sight. A kept agent's private
// directory is not counted: it keeps the host's files from the sandbox's writes,
// not from its reads (P11), and goes with its kept path.
func hidden(plan mounts.Plan, before *policy.Policy, path string) bool {
	op := governing(plan, path)
	switch op.Kind {
	case mounts.Mask:
		return true
	case mounts.Tmpfs:
		return !slices.Contains(before.KeepPrivate, op.Dest)
	case mounts.BindRO:
		return op.Source == "/EMPTY-DIR" || op.Source == "/EMPTY-FILE" || op.Source == mounts.MaskSource
	}
	return false
}

// TestRepoFileNarrowing: the attack of issue 30 and its neighbours through the
// code cmdExec runs: allow-net = [] is refused naming its line and key, offline from
// the file wins over the user's allow-net, a narrowed keep-agent is announced.
func TestRepoFileNarrowing(t *testing.T) {
	x := newRepoFixture(t)
	t.Setenv("HOME", x.home)
	for _, v := range []string{"XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME"} {
		t.Setenv(v, "")
	}
	path := filepath.Join(x.repo, config.RepoFile)
	for _, tc := range []struct {
		file, err, note string
		net             bool // the session with the file has a network namespace
	}{
		{"# empty\nallow-net = []\n", path + ":2: allow-net: would remove the sandbox's network namespace", "", false},
		{"allow-net = []\noffline = true\n", "", "allow-net a.test,@npm → (none); offline false → true", true},
		{"offline = true\n", "", "offline (" + path + ":1, narrowing) wins over allow-net a.test,@npm (command line)", true},
		{"keep-agent = [\"codex\"]\n", "", path + " narrows this session: keep-agent claude,codex → codex", true},
		{"allow-net = [\"@npm\"]\nkeep = [\"~/notes\"]\n", "", "allow-net a.test,@npm → @npm", true},
		{"allow-socket = []\nallow-git-push = false\n", "", "allow-socket", true},
		{"read-only = true\n", "", "read-only (" + path + ":1, narrowing) wins over add-dir", true},
		{"nested-sandbox = false\n", "", path + " narrows this session: nested-sandbox true → false", true},
		{"nested-sandbox = true\n", path + ":1: nested-sandbox: may only be false", "", false},
		{"[profile.x]\noffline = true\n", "profiles belong in the user's config file", "", false},
	} {
		rf, err := config.Parse(path, []byte(tc.file))
		if err != nil {
			t.Fatal(err)
		}
		a, fs, prov, before := x.args(t, 0)
		pol, notes, err := narrowBy(a, fs, prov, before, rf)
		if err != nil {
			if tc.err == "" || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: %v", tc.file, err)
			}
			continue
		}
		if tc.err != "" {
			t.Errorf("%q: accepted, want refused with %q (notes %q)", tc.file, tc.err, notes)
			continue
		}
		if got := strings.Join(notes, "\n"); !strings.Contains(got, tc.note) {
			t.Errorf("%q: notes %q, want %q", tc.file, got, tc.note)
		}
		if (pol.Offline || len(pol.AllowNet) > 0) != tc.net {
			t.Errorf("%q: network namespace %v, want %v", tc.file, !tc.net, tc.net)
		}
	}
}
