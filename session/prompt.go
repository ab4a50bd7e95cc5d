package session

import (
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/policy"
)

// EnvPromptMarker is what an interactive shell's prompt shows inside: Debian's and
// Ubuntu's default prompts print $debian_chroot in parentheses before user@host, as
// schroot's sessions do; a prompt of one's own can test $AGENTBOX (docs/terminal.md).
const EnvPromptMarker = "debian_chroot"

// interactiveShells are the shells whose bare start on a terminal is an interactive
// session.
var interactiveShells = []string{"sh", "bash", "dash", "zsh", "ksh", "mksh", "fish", "yash"}

// withPromptMarker is env with the prompt marked for an interactive shell started
// inside (a shell with no arguments, or -i/-l, its standard input a terminal),
// unless env sets debian_chroot already; --unset-env debian_chroot turns it off.
func withPromptMarker(env []string, p *policy.Policy, stdin *os.File) []string {
	c := p.Command
	if len(c) == 0 || len(c) > 2 || len(c) == 2 && c[1] != "-i" && c[1] != "-l" && c[1] != "--login" {
		return env
	}
	if !slices.Contains(interactiveShells, filepath.Base(c[0])) || stdin == nil {
		return env
	}
	if _, err := unix.IoctlGetTermios(int(stdin.Fd()), unix.TCGETS); err != nil {
		return env
	}
	for _, kv := range env {
		if strings.HasPrefix(kv, EnvPromptMarker+"=") {
			return env
		}
	}
	return append(env, EnvPromptMarker+"=agentbox")
}
