package cli

import "strings"

// List is the value of a repeatable flag (--keep A --keep B): each use appends. The
// config layer reads and replaces it whole (Values, Replace), which is how a
// repository's file narrows a list to what the user allowed.
type List struct{ p *[]string }

// NewList returns a List that appends to *p.
func NewList(p *[]string) *List { return &List{p: p} }

// Set appends v.
func (l *List) Set(v string) error { *l.p = append(*l.p, v); return nil }

// String joins the values with commas (for flag's default display).
func (l *List) String() string {
	if l == nil || l.p == nil {
		return ""
	}
	return strings.Join(*l.p, ",")
}

// Values returns the values in the order given.
func (l *List) Values() []string { return append([]string(nil), *l.p...) }

// Replace sets the values to v.
func (l *List) Replace(v []string) { *l.p = append([]string(nil), v...) }
