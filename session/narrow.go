package session

import (
	"reflect"

	"github.com/agentbox/agentbox/policy"
)

// Narrows returns nil when the session after describes is within before's: its
// policy (policy.Narrows) and the session's own protections (the push guard, the
// metadata snapshot, the record). A repository's file, which the sandbox writes, is
// accepted only then. A Config field without a rule here must be equal, so that a
// field added later is refused until its rule is written.
func Narrows(before, after *Config) error {
	t := reflect.TypeFor[Config]()
	bv, av := reflect.ValueOf(before).Elem(), reflect.ValueOf(after).Elem()
	for i := range t.NumField() {
		name := t.Field(i).Name
		switch narrowClass(name) {
		case narrowIgnored:
			continue
		case narrowPolicy:
			if err := policy.Narrows(before.Policy, after.Policy); err != nil {
				return err
			}
			continue
		case narrowPush:
			if after.AllowGitPush && !before.AllowGitPush {
				return &policy.Widening{Field: name, Reason: "would turn the push guard off"}
			}
			continue
		}
		if !sameField(bv.Field(i), av.Field(i)) {
			return &policy.Widening{Field: name, Reason: "would change " + name + ", which only the user's policy sets"}
		}
	}
	return nil
}

// sameField: b and a are equal; an unexported field, which cannot be read through
// reflection, only when both are its zero value (nothing set it yet).
func sameField(b, a reflect.Value) bool {
	if !b.CanInterface() {
		return b.IsZero() && a.IsZero()
	}
	return reflect.DeepEqual(b.Interface(), a.Interface())
}

type narrowKind int

const (
	narrowUnknown narrowKind = iota // a field not named here: must be equal, and a test fails
	narrowEqual                     // must not change
	narrowIgnored                   // not part of what the sandbox is: output, timing, run state
	narrowPolicy                    // policy.Narrows
	narrowPush                      // may only turn the push guard on
)

// narrowClass says how the Config field name may change under a repository's file.
func narrowClass(name string) narrowKind {
	switch name {
	case "Policy":
		return narrowPolicy
	case "AllowGitPush":
		return narrowPush
	case "DryRun", "Args", "Stdout", "Stderr", "Stdio", "Signals", "Version", "KeepGC", "Notes", "sessionID", "gc":
		return narrowIgnored
	case "GitSave", "NoRecord", "NoAudit", "Env", "InitBinary", "InitFile", "Driver":
		return narrowEqual
	}
	return narrowUnknown
}
