// Command godoor is the Go API's door into the behaviour table: a small program built
// against package sandbox, as a user of the Go API writes one. It takes the part of
// `agentbox exec`'s command line that the Go API has options for and runs the
// command through sandbox.Run (or, with --dry-run --json, prints sandbox.Plan), so
// that the same rows check the same promises through both doors.
//
//	godoor exec [--backend native] [--repo DIR] [--offline] [--disk-tmp] [--nested-sandbox]
//	            [--tmp-size SIZE] [--gpu] [--device PATH]...
//	            [--host-port PORT[:HOSTPORT]]... [--publish PORT[:HOSTPORT]]...
//	            [--ssh-agent] [--ssh-key KEY]... [--no-git-save] [--no-record] [--allow-git-push]
//	            [--init-binary PATH] [--dry-run --json] [--] COMMAND [ARG...]
//
// It exits as agentbox exec does: the command's status, 125 with one line naming
// what failed when agentbox failed before the command started. With EnvLauncher set
// it runs the command through a sandbox.Launcher's Run instead.
package main

import (
	"flag"
	"fmt"
	"github.com/agentbox/agentbox/internal/bytesize"
	"io"
	"os"

	"github.com/agentbox/agentbox/policy"
	"github.com/agentbox/agentbox/sandbox"
)

// EnvLauncher makes godoor launch through a sandbox.Launcher.
const EnvLauncher = "AGENTBOX_GODOOR_LAUNCHER"

func main() {
	sandbox.Init() // first: this program is also the sandbox's init
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) == 0 || args[0] != "exec" {
		return fail("usage: godoor exec [FLAGS] [--] COMMAND [ARG...]")
	}
	fs := flag.NewFlagSet("exec", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	backend := fs.String("backend", "native", "")
	var opts sandbox.Options
	fs.StringVar(&opts.Repo, "repo", "", "")
	fs.StringVar(&opts.Home, "home", "", "") // Options.Home: the command's HOME (not exec's)
	fs.BoolVar(&opts.Offline, "offline", false, "")
	fs.BoolVar(&opts.DiskTmp, "disk-tmp", false, "")
	fs.BoolVar(&opts.NestedSandbox, "nested-sandbox", false, "")
	fs.Func("tmp-size", "", func(s string) (err error) { opts.TmpSize, err = bytesize.Parse(s); return err })
	fs.BoolVar(&opts.GPU, "gpu", false, "")
	fs.Func("device", "", func(s string) error { opts.Devices = append(opts.Devices, s); return nil })
	fs.Func("host-port", "", portFlag(&opts.HostPorts))
	fs.Func("publish", "", portFlag(&opts.Publish))
	fs.BoolVar(&opts.SSHAgent, "ssh-agent", false, "")
	fs.Func("ssh-key", "", func(v string) error { opts.SSHKeys = append(opts.SSHKeys, v); return nil })
	fs.BoolVar(&opts.NoGitSave, "no-git-save", false, "")
	fs.BoolVar(&opts.NoRecord, "no-record", false, "")
	fs.BoolVar(&opts.AllowGitPush, "allow-git-push", false, "")
	fs.BoolVar(&opts.SecretEnv, "secret-env", false, "") // Options.SecretEnv: --hide-secrets' variables
	fs.StringVar(&opts.InitBinary, "init-binary", "", "")
	dryRun := fs.Bool("dry-run", false, "")
	asJSON := fs.Bool("json", false, "")
	if err := fs.Parse(args[1:]); err != nil {
		return fail("exec: %v", err)
	}
	if *backend != "native" {
		return fail("exec: --backend %s: the Go API runs the native backend", *backend)
	}
	opts.Command = fs.Args()
	opts.Stdin, opts.Stdout, opts.Stderr = os.Stdin, os.Stdout, os.Stderr
	if *dryRun {
		if !*asJSON {
			return fail("exec: --dry-run goes with --json here")
		}
		plan, err := sandbox.Plan(opts)
		if err != nil {
			return fail("%v", err)
		}
		b, err := plan.JSON()
		if err != nil {
			return fail("%v", err)
		}
		fmt.Printf("%s\n", b)
		return 0
	}
	runSandbox := sandbox.Run
	if os.Getenv(EnvLauncher) != "" {
		l, err := sandbox.NewLauncher("")
		if err != nil {
			return fail("%v", err)
		}
		defer l.Close()
		runSandbox = l.Run
	}
	res, err := runSandbox(opts)
	if err != nil {
		return fail("%v", err)
	}
	return res.Status
}

// portFlag appends PORT[:HOSTPORT] to list, parsed as agentbox exec parses it.
func portFlag(list *[]sandbox.PortMap) func(string) error {
	return func(v string) error {
		m, err := policy.ParsePortMap(v)
		if err != nil {
			return fmt.Errorf("%q: %w", v, err)
		}
		*list = append(*list, m)
		return nil
	}
}

func fail(format string, args ...any) int {
	fmt.Fprintf(os.Stderr, "agentbox: "+format+"\n", args...)
	return 125
}
