// Package policy turns the user's options into a validated sandbox policy: which
// directory is the writable repository, which HOME is overlaid, where agentbox keeps
// its cache and state. It reads the filesystem to resolve paths but changes nothing.
//
// The repository rules (docs/promises.md P2, P6) live here and only here: a repository that is
// "/" or is or contains $HOME, /tmp, /run, /proc or /dev is refused, because binding
// such an ancestor writable would undo a protection layer.
package policy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentbox/agentbox/internal/grantledger"
	"github.com/agentbox/agentbox/internal/hostpath"
	"github.com/agentbox/agentbox/internal/termsafe"

	"github.com/agentbox/agentbox/netproxy"
)

// Backend names accepted by --backend.
const (
	BackendNative = "native"
	BackendBwrap  = "bwrap"
	BackendAuto   = "auto"
)

// Options are the user's choices, as given on the command line and in the environment.
// The zero value asks for the defaults.
type Options struct {
	Repo    string // --repo; empty: Git top level of Cwd, else Cwd
	Cwd     string // the caller's working directory (must be absolute)
	Home    string // $HOME; empty or "/": no HOME overlay
	Offline bool   // --offline: new network namespace, loopback only
	DiskTmp bool   // --disk-tmp: /tmp on disk below the cache dir
	Backend string // --backend; empty means native
	// TmpSize (--tmp-size) is the budget of the RAM-backed filesystems
	// (tmpsize.go); empty: DefaultTmpSize.
	TmpSize string
	// Memory, Pids and CPUs (--memory SIZE, --pids N, --cpus N) bound the
	// session's processes together (limits.go); empty: no limit.
	Memory, Pids, CPUs string

	Keep      []string // --keep PATH (repeatable), keep.go
	KeepAgent []string // --keep-agent NAME (repeatable), keep.go

	Hide        []string // --hide PATH (repeatable), hide.go
	HideSecrets bool     // --hide-secrets, hide.go (and env.go)
	UnsetEnv    []string // --unset-env NAME (repeatable), env.go
	ClearEnv    bool     // --clear-env, env.go
	ReadOnly    bool     // --read-only: the repository read-only too (a review session)
	AllowSocket []string // --allow-socket PATH (repeatable), socket.go
	AddDir      []string // --add-dir DIR (repeatable), adddir.go
	// NestedSandbox (--nested-sandbox): the command may mount, so that an agent's
	// own sandbox (bubblewrap, unshare -m) works inside; see Policy.NestedSandbox.
	NestedSandbox bool
	// Devices (--device PATH, repeatable) are host character devices handed in
	// at their own paths; GPU (--gpu) adds the host's GPU nodes (device.go).
	Devices []string
	GPU     bool

	XDGCacheHome  string // $XDG_CACHE_HOME
	XDGStateHome  string // $XDG_STATE_HOME
	XDGConfigHome string // $XDG_CONFIG_HOME: where the user's config lives (configdir.go)
	// Environ is the launcher's environment ("NAME=value"): where --hide-secrets
	// finds the stores a variable moves (hide.go, SecretEnvPaths).
	Environ []string

	Command []string // argv of the sandboxed command; empty: Shell
	Shell   string   // $SHELL

	// AllowNet (--allow-net, repeatable): new network namespace whose only way
	// out is the launcher's proxy, to these hosts (netproxy.Parse's syntax).
	AllowNet []string

	// SSHAgent (--ssh-agent) serves the sandbox a filtered SSH agent forwarding
	// to SSHAuthSock; SSHKey (--ssh-key, repeatable) names the keys it may list
	// and use (none: every key) and implies SSHAgent; NoSSHAgent (--ssh-agent=false,
	// a repository's file) turns both off. sshagent.go.
	SSHAgent    bool
	SSHKey      []string
	NoSSHAgent  bool
	SSHAuthSock string // the host's $SSH_AUTH_SOCK

	// HostPort (--host-port PORT[:HOSTPORT], repeatable) and Publish (--publish
	// PORT[:HOSTPORT], repeatable) forward TCP between the sandbox's loopback and
	// the host's, through the launcher (ports.go).
	HostPort []string
	Publish  []string
}

// Policy is a validated, canonical description of one sandbox. Every path in it is
// absolute, clean and free of symlinks at the time it was resolved.
type Policy struct {
	Repo     string   // the one writable host directory
	Home     string   // overlaid HOME; empty when there is none
	Workdir  string   // working directory inside the sandbox
	Offline  bool     // new network namespace
	AllowNet []string // --allow-net values, validated; new network namespace and the proxy
	DiskTmp  bool     // /tmp on disk
	TmpSize  int64    // bytes the RAM-backed filesystems may hold together (tmpsize.go)
	Limits   Limits   // --memory, --pids, --cpus (limits.go)
	Backend  string   // native, bwrap or auto
	CacheDir string   // ${XDG_CACHE_HOME:-$HOME/.cache}/agentbox
	StateDir string   // ${XDG_STATE_HOME:-$HOME/.local/state}/agentbox
	// ConfigDir is ${XDG_CONFIG_HOME:-$HOME/.config}/agentbox, the user's config
	// file's: never writable inside (configdir.go).
	ConfigDir string
	Command   []string // what runs inside

	Keep         []Kept   // paths below HOME writable through the overlay (keep.go)
	KeepReadOnly []string // directories inside kept ones bound read-only (presets)
	KeepPrivate  []string // directories inside kept ones that are a private tmpfs (presets)
	KeepAgents   []string // the presets asked for (--keep-agent)
	Hide         []Hidden // paths empty inside (hide.go)
	// GitConfigCopies: --hide-secrets; the repository's Git configs that hold a
	// credential are shown as copies without it (gitcopy.go).
	GitConfigCopies bool
	// Startup are the operator's start-up files that lie in the repository or an
	// --add-dir: read-only inside (startup.go).
	Startup  []StartupFile
	ReadOnly bool     // --read-only: nothing of the host is writable but kept paths
	Sockets  []Socket // host sockets handed in (socket.go)
	AddDirs  []string // further writable directories, canonical (adddir.go)
	// NestedSandbox: host path sockets are kept out of reach by masking those
	// found at launch, as before Linux 7.1, instead of by Landlock's resolve-unix
	// rule, whose domain refuses every mount(2) and pivot_root(2) the command makes:
	// the command can build a sandbox of its own, but reaches sockets the host binds
	// after the launch (kernel.DenyPathSockets). Below Linux 7.1 it changes nothing.
	NestedSandbox bool
	Env           EnvRules // what of the launcher's environment the command does not get (env.go)
	// SSHAgent is the host agent socket the session's filtered agent forwards to
	// (--ssh-agent; "" none), SSHKeys the keys it lets through (none: every key).
	SSHAgent string
	SSHKeys  []string
	// Devices are the host character devices the sandbox's /dev gets (--device,
	// --gpu; device.go).
	Devices []Device
	// HostPorts: 127.0.0.1:Inside in the sandbox reaches the host's 127.0.0.1:Host
	// (--host-port); Publish: the host's 127.0.0.1:Host reaches 127.0.0.1:Inside in
	// the sandbox (--publish). Only with a network namespace of the sandbox's own.
	HostPorts []PortMap
	Publish   []PortMap
}

// Error is a refusal: the path the user gave and why it cannot be used.
type Error struct {
	What   string // "repo", "HOME", "backend" …
	Path   string
	Reason string
}

func (e *Error) Error() string {
	if e.Path == "" {
		return fmt.Sprintf("%s: %s", e.What, e.Reason)
	}
	return fmt.Sprintf("%s %s: %s", e.What, quote(e.Path), e.Reason)
}

// quote keeps a hostile path on one line in messages, free of terminal controls.
func quote(p string) string { return termsafe.Quote(p) }

// Reserved are the host directories that a repository may neither be nor contain, and
// the reason given for each; HOME is added at run time.
var reserved = []string{"/tmp", "/run", "/proc", "/dev"}

// pseudo are the trees a repository may not lie in: binding part of them writable
// would reveal what the private mounts hide.
var pseudo = []string{"/proc", "/dev", "/sys"}

// New validates opts and resolves every path. It never changes the filesystem.
func New(opts Options) (*Policy, error) {
	if !filepath.IsAbs(opts.Cwd) {
		return nil, &Error{What: "working directory", Path: opts.Cwd, Reason: "is not absolute"}
	}
	p, err := resolveSettings(opts)
	if err != nil {
		return nil, err
	}

	home, err := resolveHome(opts.Home)
	if err != nil {
		return nil, err
	}
	p.Home = home

	cwd, err := filepath.EvalSymlinks(opts.Cwd)
	if err != nil {
		return nil, &Error{What: "working directory", Path: opts.Cwd, Reason: reason(err)}
	}

	repo, err := resolveRepo(opts.Repo, cwd)
	if err != nil {
		return nil, err
	}
	err = CheckRepo(repo, home)
	if op := operatorHome(operatorEnv(opts)("HOME")); err == nil && op != "" && op != home {
		// P6 for the operator's HOME too, where Options.Home gave the command
		// another (the Go API): it holds the operator's shell, SSH and Git set-up.
		err = CheckRepo(repo, op)
	}
	if err != nil {
		if opts.Repo == "" {
			// The repository was not named: it came from the working directory.
			var pe *Error
			if errors.As(err, &pe) {
				pe.Reason += "; cd into a project or pass --repo DIR"
			}
		}
		return nil, err
	}
	p.Repo = repo
	p.ConfigDir = xdgDir(opts.XDGConfigHome, opts.Home, ".config")
	if !p.ReadOnly {
		if err := p.checkConfigNotWritable("repo", repo, repo); err != nil {
			return nil, err
		}
	}

	p.Workdir = repo
	if hostpath.Within(cwd, repo) {
		p.Workdir = cwd
	}

	p.CacheDir = xdgDir(opts.XDGCacheHome, opts.Home, ".cache")
	p.StateDir = grantledger.StateDir(opts.XDGStateHome, opts.Home) // the Go API passes its environment's XDG_STATE_HOME, so that Options.Home does not move it
	if err := CheckRepoState(p.Repo, p.StateDir); err != nil && !p.ReadOnly {
		return nil, err
	}
	if err := CheckOwnDir("state directory", p.StateDir, os.Geteuid()); err != nil { // owner.go
		return nil, err
	}
	if err := CheckRepoOwner(p.Repo, os.Geteuid()); err != nil && !p.ReadOnly {
		return nil, err
	}
	if err := CheckOwnDir("cache directory", p.CacheDir, os.Geteuid()); err != nil {
		return nil, err
	}
	if err := resolveKeep(p, opts, cwd); err != nil {
		return nil, err
	}
	if err := resolveAddDirs(p, opts, cwd); err != nil {
		return nil, err
	}
	if err := resolveHide(p, opts, cwd); err != nil {
		return nil, err
	}
	if err := resolveDevices(p, opts, cwd); err != nil {
		return nil, err
	}
	if err := resolveServices(p, opts); err != nil {
		return nil, err
	}
	if err := resolveSockets(p, opts); err != nil {
		return nil, err
	}
	if err := resolveEnv(p, opts); err != nil {
		return nil, err
	}
	if err := checkAgentNotHandedIn(p); err != nil {
		return nil, err
	}
	if p.DiskTmp && p.CacheDir == "" {
		return nil, &Error{What: "--disk-tmp", Reason: "needs $XDG_CACHE_HOME or $HOME to place the session directory"}
	}
	if err := p.checkGrants(opts); err != nil {
		return nil, err
	}
	if err := resolveStartup(p, opts); err != nil {
		return nil, err
	}

	if err := resolveCommand(p, opts); err != nil {
		return nil, err
	}
	return p, nil
}

// resolveSettings checks the settings that name no path: the budgets and limits,
// the network choice and the backend.
func resolveSettings(opts Options) (*Policy, error) {
	p := &Policy{Offline: opts.Offline, DiskTmp: opts.DiskTmp, ReadOnly: opts.ReadOnly, NestedSandbox: opts.NestedSandbox}
	tmpSize, err := TmpSize(opts.TmpSize, TotalRAM())
	if err != nil {
		return nil, &Error{What: "--tmp-size", Path: opts.TmpSize, Reason: err.Error()}
	}
	p.TmpSize = tmpSize
	if p.Limits, err = resolveLimits(opts); err != nil {
		return nil, err
	}
	if len(opts.AllowNet) > 0 {
		if opts.Offline {
			return nil, &Error{What: "--allow-net", Reason: "goes against --offline (no network at all); give one of them"}
		}
		if _, err := netproxy.ParseAll(opts.AllowNet); err != nil {
			return nil, err
		}
		p.AllowNet = opts.AllowNet
	}

	switch opts.Backend {
	case "", BackendNative:
		p.Backend = BackendNative
	case BackendBwrap, BackendAuto:
		p.Backend = opts.Backend
	default:
		return nil, &Error{What: "backend", Path: opts.Backend, Reason: "unknown (want native, bwrap or auto)"}
	}
	return p, nil
}

// resolveCommand sets the command, the user's shell when none is given.
func resolveCommand(p *Policy, opts Options) error {
	p.Command = opts.Command
	if len(p.Command) == 0 {
		sh := opts.Shell
		if sh == "" {
			sh = "/bin/bash"
		}
		p.Command = []string{sh}
	}
	if p.Command[0] == "" {
		return &Error{What: "command", Reason: "is empty"}
	}
	return nil
}

// CacheDirFor is the cache dir a session with this $XDG_CACHE_HOME and $HOME uses
// (Policy.CacheDir), for commands that need it without a whole policy (agentbox gc).
func CacheDirFor(xdgCacheHome, home string) string {
	return xdgDir(xdgCacheHome, home, ".cache")
}

// xdgDir is ${xdg:-$home/fallback}/agentbox, or "" when neither is usable. A relative
// XDG value is ignored, as the XDG base-directory specification asks.
func xdgDir(xdg, home, fallback string) string {
	if filepath.IsAbs(xdg) {
		return filepath.Join(xdg, "agentbox")
	}
	if filepath.IsAbs(home) {
		return filepath.Join(home, fallback, "agentbox")
	}
	return ""
}

// operatorHome is the canonical form of home, the operator's $HOME (operatorEnv),
// when it is an existing directory other than "/"; "" otherwise.
func operatorHome(home string) string {
	if !filepath.IsAbs(home) {
		return ""
	}
	canon, err := filepath.EvalSymlinks(home)
	if err != nil || canon == "/" {
		return ""
	}
	if fi, err := os.Stat(canon); err != nil || !fi.IsDir() {
		return ""
	}
	return canon
}

// operatorEnv looks variables up in the launcher's environment: opts.Environ, or
// this process's where it is nil (the Go API, whose caller is the launcher).
func operatorEnv(opts Options) func(string) string {
	if opts.Environ == nil {
		return os.Getenv
	}
	return environGetter(opts.Environ)
}

func resolveHome(home string) (string, error) {
	if home == "" || home == "/" {
		return "", nil
	}
	if !filepath.IsAbs(home) {
		return "", &Error{What: "HOME", Path: home, Reason: "is not absolute"}
	}
	canon, err := filepath.EvalSymlinks(home)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil // nothing to overlay
	}
	if err != nil {
		return "", &Error{What: "HOME", Path: home, Reason: reason(err)}
	}
	if canon == "/" {
		return "", nil
	}
	fi, err := os.Stat(canon)
	if err != nil {
		return "", &Error{What: "HOME", Path: home, Reason: reason(err)}
	}
	if !fi.IsDir() {
		return "", &Error{What: "HOME", Path: home, Reason: "is not a directory"}
	}
	if err := CheckHome(home, canon); err != nil {
		return "", err
	}
	return canon, nil
}

// homeReserved are the trees HOME may neither be, contain nor lie in. The sandbox
// replaces each with a private mount (P4, P5); the HOME overlay, mounted after them,
// would lay the host's own directory back over the private one (HOME=/tmp shows the
// host's /tmp inside), or try to overlay a pseudo-filesystem (HOME=/run/user/N, /proc,
// /sys), which the kernel refuses with an unrelated-looking error.
var homeReserved = []string{"/tmp", "/run", "/proc", "/dev", "/sys"}

// CheckHome applies the HOME rules to home as given (absolute) and to canon, its
// canonical form: /proc/self/cwd lies in /proc though it resolves elsewhere. "/" is
// not checked: it means no HOME overlay at all.
func CheckHome(home, canon string) error {
	if err := checkHome(home, filepath.Clean(home)); err != nil {
		return err
	}
	return checkHome(home, canon)
}

func checkHome(home, canon string) error {
	if canon == "/" {
		return nil
	}
	for _, dir := range homeReserved {
		for _, form := range canonicalForms(dir) {
			var what string
			switch {
			case canon == form:
				what = "is " + dir
			case hostpath.Within(canon, form):
				what = "lies inside " + dir
			case hostpath.Within(form, canon):
				what = "contains " + dir
			default:
				continue
			}
			if canon != filepath.Clean(home) {
				what = "resolves to " + quote(canon) + ", which " + what
			}
			return &Error{What: "HOME", Path: home, Reason: what + "; the sandbox replaces " + dir +
				" with a private mount and overlaying HOME there would undo it: set HOME to a directory outside /tmp, /run, /proc, /dev and /sys (HOME=/ runs without a HOME overlay)"}
		}
	}
	return nil
}

// resolveRepo picks the repository: the --repo value, else the Git top level of cwd,
// else cwd. It resolves symlinks before any rule is checked.
func resolveRepo(flag, cwd string) (string, error) {
	if flag == "" {
		return hostpath.GitTopLevel(cwd), nil
	}
	if strings.ContainsRune(flag, 0) {
		return "", &Error{What: "repo", Path: flag, Reason: "contains a NUL byte"}
	}
	path := flag
	if !filepath.IsAbs(path) {
		path = filepath.Join(cwd, path)
	}
	canon, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", &Error{What: "repo", Path: flag, Reason: reason(err)}
	}
	fi, err := os.Stat(canon)
	if err != nil {
		return "", &Error{What: "repo", Path: flag, Reason: reason(err)}
	}
	if !fi.IsDir() {
		return "", &Error{What: "repo", Path: flag, Reason: "is not a directory"}
	}
	return canon, nil
}

// CheckRepo applies the repository rules to a canonical path.
func CheckRepo(repo, home string) error {
	if repo == "/" {
		return &Error{What: "repo", Path: repo, Reason: "is the root directory; binding it writable would make the whole host writable"}
	}
	for _, dir := range pseudo {
		if hostpath.Within(repo, dir) && repo != dir {
			return &Error{What: "repo", Path: repo, Reason: "lies inside " + dir + ", a pseudo-filesystem the sandbox replaces"}
		}
	}
	guarded := append([]string(nil), reserved...)
	if home != "" {
		guarded = append(guarded, home)
	}
	for _, dir := range guarded {
		for _, form := range canonicalForms(dir) {
			if hostpath.Within(form, repo) {
				what := "is"
				if form != repo {
					what = "contains"
				}
				return &Error{What: "repo", Path: repo, Reason: fmt.Sprintf("%s %s; rebinding it writable would undo a protection", what, dir)}
			}
		}
	}
	return nil
}

// canonicalForms is dir and, when it differs, dir with symlinks resolved (on some
// hosts /tmp or HOME is a symlink).
func canonicalForms(dir string) []string {
	forms := []string{dir}
	if c, err := filepath.EvalSymlinks(dir); err == nil && c != dir {
		forms = append(forms, c)
	}
	return forms
}

// reason turns a filesystem error into the short phrase used in refusals.
func reason(err error) string {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "does not exist"
	case errors.Is(err, fs.ErrPermission):
		return "permission denied"
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// CheckRepoState refuses a repository that holds agentbox's state directory or lies
// in it: the sandbox would write the journals and baselines the audit trusts, and
// `agentbox audit --fix` would quarantine its own quarantine.
func CheckRepoState(repo, stateDir string) error {
	if stateDir == "" {
		return nil
	}
	for _, form := range canonicalForms(resolveExisting(stateDir)) {
		if hostpath.Within(form, repo) || hostpath.Within(repo, form) {
			return &Error{What: "repo", Path: repo, Reason: "holds agentbox's own state (" + quote(stateDir) + ") or lies in it; set XDG_STATE_HOME elsewhere or pick the project below it"}
		}
	}
	return nil
}
