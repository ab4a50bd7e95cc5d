package cli

import (
	"flag"
	"strings"
)

// Suggest returns the candidate closest to word when it is close enough to be a
// typo (an edit distance of at most a third of its length, and at least one), or "".
func Suggest(word string, candidates []string) string {
	best, bestD := "", len(word)/3+1
	for _, c := range candidates {
		if d := distance(word, c); d < bestD || d == bestD && best == "" && d <= 2 {
			best, bestD = c, d
		}
	}
	return best
}

// distance is the Levenshtein distance of a and b (bytes: names are ASCII).
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// flagHint adds "did you mean --x?" to an unknown flag's message.
func flagHint(fs *flag.FlagSet, msg string) string {
	name, ok := strings.CutPrefix(msg, "unknown flag: ")
	if !ok {
		return msg
	}
	var names []string
	fs.VisitAll(func(f *flag.Flag) {
		if !Hidden(f) {
			names = append(names, f.Name)
		}
	})
	if s := Suggest(strings.TrimLeft(name, "-"), names); s != "" {
		return msg + " (did you mean " + Name(s) + "?)"
	}
	return msg
}

// takenAsValue refuses a flag that took "--" or another flag as its value
// ("--profile -- claude"): the user left the value out.
func takenAsValue(fs *flag.FlagSet, args []string) string {
	for i := 0; i+1 < len(args); i++ {
		a := args[i]
		if a == "--" || a == "-" || !strings.HasPrefix(a, "-") {
			return "" // the flags end here, as fs.Parse would end them
		}
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		f := fs.Lookup(name)
		if f == nil {
			continue
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			continue
		}
		next := args[i+1]
		if next == "--" || strings.HasPrefix(next, "--") && fs.Lookup(strings.TrimPrefix(next, "--")) != nil {
			return "flag needs an argument: " + Name(name) + " (it would take " + next + " as its value)"
		}
		i++ // its value
	}
	return ""
}
