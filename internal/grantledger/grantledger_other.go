//go:build !linux

package grantledger

import "errors"

// Read is the ledger's reader (grantledger_linux.go); agentbox runs sessions on
// Linux only, and elsewhere refuses rather than reading nothing.
func Read(string) ([]Entry, error) {
	return nil, errors.New("the ledger of granted directories needs Linux")
}

// Record is the ledger's writer (grantledger_linux.go).
func Record(string, []string) error {
	return errors.New("the ledger of granted directories needs Linux")
}

// IdentityOf is the zero Identity: nothing is recorded off Linux.
func IdentityOf(string) Identity { return Identity{} }
