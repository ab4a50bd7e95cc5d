package policy

import "github.com/agentbox/agentbox/internal/hostpath"

// resolveAddDirs validates --add-dir: each is a further writable directory with the
// repository's rules (P6: not /, not containing HOME, /tmp, /run, /proc or /dev, not
// in /proc, /sys or /dev), and it may neither overlap the repository or another one
// nor hold agentbox's state or cache or lie in them, which the sandbox must not write. The Git
// directory rule (grant.go) is checked with every other grant's.
func resolveAddDirs(p *Policy, opts Options, cwd string) error {
	if len(opts.AddDir) > 0 && p.ReadOnly {
		return &Error{What: "--add-dir", Reason: "goes against --read-only, where the session writes nowhere (keep a scratch directory below HOME with --keep)"}
	}
	for _, arg := range opts.AddDir {
		if arg == "" {
			return &Error{What: "--add-dir", Reason: "is empty"}
		}
		dir, err := resolveRepo(arg, cwd)
		if err != nil {
			if pe, ok := err.(*Error); ok {
				pe.What = "--add-dir"
			}
			return err
		}
		if err := CheckRepo(dir, p.Home); err != nil {
			if pe, ok := err.(*Error); ok {
				pe.What = "--add-dir"
			}
			return err
		}
		refuse := func(why string) error { return &Error{What: "--add-dir", Path: arg, Reason: why} }
		for _, w := range append([]string{p.Repo}, p.AddDirs...) {
			if hostpath.Within(dir, w) || hostpath.Within(w, dir) {
				return refuse("overlaps " + quote(w) + ", which is writable already")
			}
		}
		for _, own := range []string{p.StateDir, p.CacheDir} {
			if own == "" {
				continue
			}
			for _, form := range canonicalForms(own) {
				if hostpath.Within(form, dir) {
					return refuse("holds agentbox's own state or cache (" + quote(own) + "), which the sandbox must not write")
				}
				if hostpath.Within(dir, form) {
					return refuse("lies in agentbox's own state or cache (" + quote(own) + "), which the sandbox must not write")
				}
			}
		}
		if err := p.checkConfigNotWritable("--add-dir", arg, dir); err != nil {
			return err
		}
		for _, k := range p.Keep {
			if hostpath.Within(k.Path, dir) || hostpath.Within(dir, k.Path) {
				return refuse("overlaps the kept path " + quote(k.Path))
			}
		}
		p.AddDirs = append(p.AddDirs, dir)
	}
	return nil
}
