package sandbox

import "github.com/agentbox/agentbox/internal/termsafe"

// oneLineError returns err as it is when its text is safe to print; otherwise err
// with its text made one line with no rune a terminal acts on (termsafe.String), as
// agentbox's own error line is. An error names what the repository holds — what an
// earlier session chose: a file name in an error of the Git metadata's snapshot,
// Git's own words — and a caller prints it (log.Fatal(err)) on the operator's
// terminal. errors.Is and errors.As reach the error underneath (a *SetupError).
func oneLineError(err error) error {
	if err == nil || termsafe.Safe(err.Error()) {
		return err
	}
	return lineError{err}
}

// lineError is an error whose text oneLineError escaped.
type lineError struct{ err error }

func (e lineError) Error() string { return termsafe.String(e.err.Error()) }
func (e lineError) Unwrap() error { return e.err }
