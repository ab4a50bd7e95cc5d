package session

import (
	"os"
	"path/filepath"
	"slices"

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

// setPromptMarker marks the prompt of an interactive shell started inside (a shell
// with no arguments, or -i/-l, on a terminal) unless the user set debian_chroot
// already; --unset-env debian_chroot turns it off.
func setPromptMarker(p *policy.Policy) {
	c := p.Command
	if len(c) == 0 || len(c) > 2 || len(c) == 2 && c[1] != "-i" && c[1] != "-l" && c[1] != "--login" {
		return
	}
	if !slices.Contains(interactiveShells, filepath.Base(c[0])) {
		return
	}
	if _, err := unix.IoctlGetTermios(int(os.Stdin.Fd()), unix.TCGETS); err != nil {
		return
	}
	if _, set := os.LookupEnv(EnvPromptMarker); !set {
		os.Setenv(EnvPromptMarker, "agentbox")
	}
}
