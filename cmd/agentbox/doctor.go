package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/agentbox/agentbox/bwrapcheck"
	"github.com/agentbox/agentbox/internal/cli"
	"github.com/agentbox/agentbox/internal/hostpath"
	"github.com/agentbox/agentbox/internal/kernel"
	"github.com/agentbox/agentbox/internal/seccomp"
	"github.com/agentbox/agentbox/internal/termsafe"
)

// defaultRepo is the repository a session started here would write (policy's
// default: the Git top level of the working directory), or "" when unknown.
func defaultRepo() string {
	cwd, err := os.Getwd()
	if err != nil {
		return ""
	}
	return hostpath.GitTopLevel(cwd)
}

var doctorCommand = cli.Command{
	Name:    "doctor",
	Summary: "check this machine can run the sandbox, with fixes",
	Help: `Checks, as the user running it, whether this machine can run the sandbox: it
creates a user namespace and mounts an overlay inside it, tries the newer mount
system calls, mounts a proc in a new PID namespace, and looks for bwrap. Each
failure comes with its fix. Exit status: 0 when 'agentbox exec' will work with the
default (native) backend, 1 when it will not, 125 when doctor itself failed.`,
	Flags: func() *flag.FlagSet { fs, _ := doctorFlags(); return fs },
}

func doctorFlags() (fs *flag.FlagSet, asJSON *bool) {
	fs = flag.NewFlagSet("doctor", flag.ContinueOnError)
	asJSON = fs.Bool("json", false, "print the findings as JSON")
	return fs, asJSON
}

// doctorResult is what doctor found; --json prints it.
type doctorResult struct {
	kernel.Report
	// NativeReady: agentbox exec works with the default backend.
	NativeReady bool `json:"native_ready"`
	// Refusal is the message the native backend would refuse with.
	Refusal string     `json:"refusal,omitempty"`
	Bwrap   bwrapState `json:"bwrap"`
	// PathSockets: how a launch keeps the command off the host's path sockets (nested.go).
	PathSockets doctorSockets `json:"path_sockets"`
	// Limits: which of --memory, --pids, --cpus this host enforces (doctorlimits.go).
	Limits []doctorLimit `json:"limits"`
	// NewerCallsRefused: the kernel is newer than the seccomp filter's reviewed calls,
	// and those it added since fail inside with ENOSYS.
	NewerCallsRefused bool `json:"newer_calls_refused"`
}

type bwrapState struct {
	Path    string `json:"path,omitempty"`
	Version string `json:"version,omitempty"`
	OK      bool   `json:"ok"`
	Error   string `json:"error,omitempty"`
}

func cmdDoctor(args []string) int {
	// The probes re-run this binary as "agentbox doctor" in new namespaces; that
	// child does its job and nothing else.
	if kernel.IsChild() {
		return kernel.ChildMain()
	}
	fs, asJSON := doctorFlags()
	if st, done := parseFlags(fs, doctorCommand, args); done {
		return st
	}
	if fs.NArg() > 0 {
		return fail("doctor: unexpected argument %q", fs.Arg(0))
	}
	// The running binary, not what lies at its path now (a session may replace it).
	rep := kernel.Probe(kernel.Options{Command: []string{"/proc/self/exe", "doctor"}})
	res := doctorResult{Report: rep, NativeReady: rep.NativeReady(), Refusal: rep.Refusal(), Bwrap: lookBwrap(),
		PathSockets: probeSockets(kernel.CanDenyPathSockets()), Limits: probeLimits(),
		NewerCallsRefused: seccomp.NewerThanFilter(rep.Kernel)}
	if *asJSON {
		out := termsafe.NewJSONWriter(os.Stdout) // bwrap's path and output, kernel messages
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return fail("doctor: %v", err)
		}
		out.Flush()
	} else {
		w := termsafe.NewWriter(os.Stdout) // bwrap's path and output, kernel messages
		printDoctor(w, res)
		w.Flush()
	}
	if !res.NativeReady {
		return 1
	}
	return 0
}

func lookBwrap() bwrapState {
	// The repository a session here would write: a bwrap in it is not run.
	b, err := bwrapcheck.Lookup(defaultRepo())
	if err != nil {
		st := bwrapState{Error: err.Error()}
		var be *bwrapcheck.Error
		if errors.As(err, &be) {
			if be.Path == "" { // none found: the reason says it all
				st.Error = be.Reason
			} else {
				st.Path = be.Path
			}
		}
		return st
	}
	b.Close()
	return bwrapState{Path: b.Path, Version: b.Version.String(), OK: true}
}

// bwrapAdvice tells a user without a usable bwrap whether they need one and how to get
// it where the distribution's is too old (Debian 12 ships 0.8.0, Ubuntu 24.04 0.9.0).
const bwrapAdvice = "you do not need it: the default native backend uses no bwrap. For --backend bwrap, " +
	"bubblewrap 0.12.0 or newer is needed and Debian 12 ships 0.8.0: build it from the release tarball " +
	"(apt-get install meson ninja-build gcc libcap-dev pkg-config; meson setup build -Dselinux=disabled -Dman=disabled && ninja -C build bwrap), " +
	"not setuid, then export AGENTBOX_BWRAP=/path/to/bwrap"

func printDoctor(w io.Writer, r doctorResult) {
	who := fmt.Sprintf("uid %d", r.UID)
	if r.UID == 0 {
		who += " (root: user-namespace limits do not apply to root; run doctor as the user who runs agentbox)"
	}
	fmt.Fprintf(w, "kernel %s, checked as %s\n\n", r.Kernel, who)
	for _, c := range r.Checks {
		s, _ := kernel.SpecOf(c.Name)
		mark := "ok"
		if !c.OK {
			switch s.Need {
			case kernel.Required:
				mark = "FAIL"
			case kernel.Fallback:
				mark = "fallback"
			default:
				mark = "no"
			}
		}
		fmt.Fprintf(w, "  %-9s %s (Linux %s)\n", mark, s.Title, s.Since)
		if c.OK {
			if c.Detail != "" {
				fmt.Fprintf(w, "            note: %s\n", c.Detail)
			}
			continue
		}
		if c.Detail != "" {
			fmt.Fprintf(w, "            measured: %s\n", c.Detail)
		}
		if s.Need == kernel.Fallback {
			fmt.Fprintf(w, "            agentbox uses instead: %s\n", s.Fallback)
		}
		if c.Fix != "" {
			fmt.Fprintf(w, "            fix: %s\n", c.Fix)
		}
	}
	if r.NewerCallsRefused {
		fmt.Fprintf(w, "  %-9s system calls added after Linux %s fail inside with ENOSYS until agentbox has reviewed them;\n"+
			"            most programs fall back as on an older kernel (docs/security.md, \"System calls newer than the filter\")\n", "note", seccomp.LastKnownRelease)
	}
	if r.Bwrap.OK {
		fmt.Fprintf(w, "  %-9s bwrap %s at %s (for --backend=bwrap)\n", "ok", r.Bwrap.Version, r.Bwrap.Path)
	} else {
		fmt.Fprintf(w, "  %-9s %s (needed only for --backend=bwrap)\n", "no", r.Bwrap.Error)
		fmt.Fprintf(w, "            %s\n", bwrapAdvice)
	}
	printSockets(w, r.PathSockets)
	printLimits(w, r.Limits)
	if len(r.Sysctls) > 0 {
		keys := make([]string, 0, len(r.Sysctls))
		for k := range r.Sysctls {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var kv []string
		for _, k := range keys {
			kv = append(kv, k+"="+r.Sysctls[k])
		}
		fmt.Fprintf(w, "\nsettings: %s\n", strings.Join(kv, " "))
	}
	if len(r.MaskedProc) > 0 {
		fmt.Fprintf(w, "masked /proc paths (container): %s\n", strings.Join(r.MaskedProc, " "))
	}
	if r.NativeReady {
		fmt.Fprintln(w, "\nagentbox exec will work with the default (native) backend.")
		return
	}
	fmt.Fprintf(w, "\nagentbox exec will NOT work with the default (native) backend: %s\n", r.Refusal)
}
