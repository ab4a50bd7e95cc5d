// Package cli is agentbox's thin layer over the standard library's flag package: GNU-style
// help (--flag, one line per flag, internal flags hidden), errors that name the flag the
// way the user typed it (unknown flag: --claude), and shell completions and a man page
// generated from the same flag sets, so help, completions and the manual cannot drift.
//
// Why not pflag or cobra: the standard parser already accepts --flag and --flag=value,
// which is all agentbox's interface uses (no bundled short options); what it lacks is the
// presentation, which is a few hundred lines here. Keeping it avoids a dependency and a
// package-level command tree whose initialisation every launch would pay for (the CLI's
// start-up is on the path of every sandboxed tool call).
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
)

// Command describes one subcommand for help, completions and the manual.
type Command struct {
	Name    string // e.g. "exec"
	Args    string // the positional part of the synopsis, e.g. "[--] [COMMAND [ARG...]]"
	Summary string // one line, for the command list
	Help    string // the description paragraphs printed between the synopsis and the flags
	// Flags returns a fresh flag set with the command's flags defined (values are
	// thrown away); nil for a command without flags.
	Flags func() *flag.FlagSet
	// Values are the words completions offer for a flag's value (--backend: native
	// bwrap auto); a word "$(CMD)" is CMD's output, run when completing (the
	// profiles of the user's config file).
	Values map[string][]string
}

// ErrHelp is returned by Parse after it printed the help.
var ErrHelp = flag.ErrHelp

// Hidden says whether a flag is internal: its usage starts with "internal:". Internal
// flags still parse but are left out of help, completions and the manual.
func Hidden(f *flag.Flag) bool {
	return strings.HasPrefix(f.Usage, "internal:")
}

// Name returns the flag as the user types it: --name, or -n for a one-letter flag.
func Name(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// Parse parses args into fs. On -h/--help it prints the command's help to stdout and
// returns ErrHelp; any other error is rewritten to name flags as the user typed them.
func Parse(fs *flag.FlagSet, c Command, args []string, stdout io.Writer) error {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	if msg := takenAsValue(fs, args); msg != "" {
		return errors.New(msg)
	}
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		PrintHelp(stdout, fs, c)
		return ErrHelp
	}
	if err != nil {
		return errors.New(flagHint(fs, rewrite(err.Error())))
	}
	return nil
}

// rewrite turns the flag package's messages into the GNU spelling:
//
//	flag provided but not defined: -claude  -> unknown flag: --claude
//	flag needs an argument: -repo           -> flag needs an argument: --repo
//	invalid value "x" for flag -runs: ...   -> invalid value "x" for --runs: ...
func rewrite(msg string) string {
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		return "unknown flag: " + Name(strings.TrimPrefix(name, "-"))
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		return "flag needs an argument: " + Name(strings.TrimPrefix(name, "-"))
	}
	if rest, ok := strings.CutPrefix(msg, "invalid value "); ok {
		if i := strings.Index(rest, " for flag -"); i >= 0 {
			tail := rest[i+len(" for flag -"):]
			name, why, _ := strings.Cut(tail, ": ")
			return "invalid value " + rest[:i] + " for " + Name(strings.TrimPrefix(name, "-")) + ": " + why
		}
	}
	if rest, ok := strings.CutPrefix(msg, "invalid boolean value "); ok {
		if i := strings.Index(rest, " for -"); i >= 0 {
			tail := rest[i+len(" for -"):]
			name, why, _ := strings.Cut(tail, ": ")
			return "invalid boolean value " + rest[:i] + " for " + Name(strings.TrimPrefix(name, "-")) + ": " + why
		}
	}
	return msg
}

// Visible returns fs's flags that are not internal, sorted by name.
func Visible(fs *flag.FlagSet) []*flag.Flag {
	if fs == nil {
		return nil
	}
	var out []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) {
		if !Hidden(f) {
			out = append(out, f)
		}
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// IsBool says whether f takes no argument.
func IsBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// ArgName returns the name of f's argument ("" for a boolean flag) and its usage with
// the back-quotes removed, as flag.UnquoteUsage does, but "VALUE" where flag says
// "value" and upper case throughout.
func ArgName(f *flag.Flag) (arg, usage string) {
	arg, usage = flag.UnquoteUsage(f)
	if IsBool(f) {
		return "", usage
	}
	if arg == "" || arg == "value" {
		arg = "VALUE"
	}
	return strings.ToUpper(arg), usage
}

// Synopsis is the usage line: "agentbox NAME [--flag ARG]... ARGS", every visible flag listed.
func Synopsis(prog string, fs *flag.FlagSet, c Command) string {
	var b strings.Builder
	b.WriteString(prog)
	b.WriteString(" ")
	b.WriteString(c.Name)
	for _, f := range Visible(fs) {
		arg, _ := ArgName(f)
		b.WriteString(" [")
		b.WriteString(Name(f.Name))
		if arg != "" {
			b.WriteString(" ")
			b.WriteString(arg)
		}
		b.WriteString("]")
	}
	if c.Args != "" {
		b.WriteString(" ")
		b.WriteString(c.Args)
	}
	return b.String()
}

// PrintHelp prints the usage line, the help text and the flags.
func PrintHelp(w io.Writer, fs *flag.FlagSet, c Command) {
	fmt.Fprintf(w, "Usage: %s\n", wrap(Synopsis("agentbox", fs, c), 80, "         "))
	if c.Help != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimRight(c.Help, "\n"))
	}
	flags := Visible(fs)
	if len(flags) == 0 {
		return
	}
	fmt.Fprintf(w, "\nFlags:\n")
	PrintFlags(w, flags)
}

// PrintFlags prints one entry per flag: "  --name ARG" then its usage, indented, with
// the default when it is not the zero value.
func PrintFlags(w io.Writer, flags []*flag.Flag) {
	for _, f := range flags {
		arg, usage := ArgName(f)
		head := "  " + Name(f.Name)
		if arg != "" {
			head += " " + arg
		}
		if d := Default(f); d != "" {
			usage += " (default " + d + ")"
		}
		if len(head) <= 22 {
			fmt.Fprintf(w, "%-24s%s\n", head, wrap(usage, 80-24, strings.Repeat(" ", 24)))
		} else {
			fmt.Fprintf(w, "%s\n%s%s\n", head, strings.Repeat(" ", 24), wrap(usage, 80-24, strings.Repeat(" ", 24)))
		}
	}
}

// Default returns f's default as help shows it, "" when it is the zero value.
func Default(f *flag.Flag) string {
	switch f.DefValue {
	case "", "false", "0", "[]":
		return ""
	}
	if IsBool(f) {
		return f.DefValue
	}
	if _, isString := f.Value.(interface{ String() string }); isString && !isNumber(f.DefValue) {
		return fmt.Sprintf("%q", f.DefValue)
	}
	return f.DefValue
}

func isNumber(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if (r < '0' || r > '9') && r != '.' && r != '-' {
			return false
		}
	}
	return true
}

// wrap breaks s into lines of at most width columns at spaces; lines after the first
// start with indent.
func wrap(s string, width int, indent string) string {
	words := strings.Fields(s)
	var b strings.Builder
	col := 0
	for i, w := range words {
		if i > 0 {
			if col+1+len(w) > width {
				b.WriteString("\n")
				b.WriteString(indent)
				col = 0
			} else {
				b.WriteString(" ")
				col++
			}
		}
		b.WriteString(w)
		col += len(w)
	}
	return b.String()
}
