// Command kmatrix runs agentbox's kernel matrix: it boots each pinned Debian kernel
// in qemu, runs doctor and the test binaries inside as an unprivileged user, prints
// a combined table and stores the results through the shadow collector. See
// kmatrix's package documentation and the README.
//
// Exit status: 0 when every cell passed, 1 when one failed, 125 when the matrix
// could not run (no qemu, a build failed).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/kmatrix"
	"github.com/agentbox/agentbox/shadow"
)

func main() { os.Exit(run()) }

func run() int {
	var (
		opts     kmatrix.Options
		cells    = flag.String("cells", "", "comma-separated `names` of the cells to run (default: all; see -list)")
		list     = flag.Bool("list", false, "list the cells and exit")
		outDir   = flag.String("out", "", "write matrix.json, one CELL.json per cell and table.txt into `DIR`")
		asJSON   = flag.Bool("json", false, "print the whole result as JSON instead of the table")
		noStore  = flag.Bool("no-store", false, "do not store the result through the shadow collector")
		stateDir = flag.String("state", "", "agentbox state `DIR` for the shadow collector (default ${XDG_STATE_HOME:-$HOME/.local/state}/agentbox)")
		quiet    = flag.Bool("q", false, "no progress lines on stderr")
		full     = flag.Bool("full", false, "run every test of every package (the whole behaviour table: slow under TCG); raises -timeout to 30m")
	)
	flag.StringVar(&opts.Cache, "cache", kmatrix.DefaultCache, "kernel package cache `DIR`")
	flag.StringVar(&opts.Mirror, "mirror", kmatrix.DefaultMirror, "Debian mirror `URL`")
	flag.StringVar(&opts.Work, "work", "", "keep the build directory (binaries, initramfs, console logs) in `DIR`")
	flag.IntVar(&opts.Parallel, "parallel", 2, "VMs at once")
	flag.DurationVar(&opts.Timeout, "timeout", 150*time.Second, "bound on each VM")
	flag.IntVar(&opts.MemoryMB, "mem", 1024, "memory per VM in `MiB`")
	flag.Parse()
	if flag.NArg() > 0 {
		return fail("unexpected argument %q", flag.Arg(0))
	}

	if *list {
		for _, c := range kmatrix.DefaultCells {
			fmt.Printf("%-30s %s %s  %s\n", c.Name, c.Kernel.Suite, strings.Join(c.Kernel.Packages, "+"), c.Why)
		}
		return 0
	}
	if *cells != "" {
		byName := map[string]kmatrix.Cell{}
		for _, c := range kmatrix.DefaultCells {
			byName[c.Name] = c
		}
		for _, name := range strings.Split(*cells, ",") {
			c, ok := byName[strings.TrimSpace(name)]
			if !ok {
				return fail("no cell %q (see -list)", name)
			}
			opts.Cells = append(opts.Cells, c)
		}
	}
	// Under tcg (no usable kvm) a VM runs several times slower: a longer bound,
	// unless one was given.
	timeoutSet := false
	flag.Visit(func(f *flag.Flag) { timeoutSet = timeoutSet || f.Name == "timeout" })
	if !timeoutSet && kmatrix.Accel() == "tcg" {
		opts.Timeout = 300 * time.Second
	}
	if *full {
		opts.Tests = kmatrix.Full(kmatrix.TestPackages)
		opts.Timeout = max(opts.Timeout, 30*time.Minute)
	}
	if !*quiet {
		opts.Log = func(format string, args ...any) {
			fmt.Fprintf(os.Stderr, "kmatrix: "+format+"\n", args...)
		}
	}
	if opts.Work != "" {
		if err := os.MkdirAll(opts.Work, 0o755); err != nil {
			return fail("%v", err)
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	m, err := kmatrix.Run(ctx, opts)
	if err != nil {
		return fail("%v", err)
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fail("%v", err)
	}
	if *asJSON {
		fmt.Printf("%s\n", data)
	} else if err := kmatrix.WriteTable(os.Stdout, m); err != nil {
		return fail("%v", err)
	}
	if *outDir != "" {
		if err := writeOut(*outDir, m, data); err != nil {
			return fail("%v", err)
		}
	}
	if !*noStore {
		dir := *stateDir
		if dir == "" {
			dir = defaultStateDir()
		}
		id, err := shadow.StoreResult(dir, "kmatrix", data)
		if err != nil {
			fmt.Fprintf(os.Stderr, "kmatrix: storing the result: %v\n", err)
		} else if !*quiet {
			fmt.Fprintf(os.Stderr, "kmatrix: stored as result %s (agentbox log --results)\n", id)
		}
	}
	if !m.Passed() {
		return 1
	}
	return 0
}

func writeOut(dir string, m kmatrix.Matrix, data []byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "matrix.json"), append(data, '\n'), 0o644); err != nil {
		return err
	}
	for _, r := range m.Results {
		b, _ := json.MarshalIndent(r, "", "  ")
		if err := os.WriteFile(filepath.Join(dir, r.Cell+".json"), append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	f, err := os.Create(filepath.Join(dir, "table.txt"))
	if err != nil {
		return err
	}
	if err := kmatrix.WriteTable(f, m); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// defaultStateDir is agentbox's state directory, as the policy package computes it.
func defaultStateDir() string {
	if x := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(x) {
		return filepath.Join(x, "agentbox")
	}
	return filepath.Join(os.Getenv("HOME"), ".local", "state", "agentbox")
}

func fail(format string, args ...any) int {
	fmt.Fprintf(os.Stderr, "kmatrix: "+format+"\n", args...)
	return 125
}
