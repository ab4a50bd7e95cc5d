// Package vmtest holds the smoke tests kmatrix runs inside every VM (and that run on
// the host like any test): the real agentbox binary, as an unprivileged user, must
// either start a sandbox or refuse with exit status 125 and the message doctor
// gives, and doctor's exit status must match its verdict.
package vmtest
