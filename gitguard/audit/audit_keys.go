package audit

import (
	"fmt"
	"strings"

	"github.com/agentbox/agentbox/gitguard/gitconfig"
)

// Danger says why a config entry can make Git run a program, or "" when it cannot.
// The list follows git-config(1): every variable whose value Git runs as a command
// (or hands to the shell), names a program, points Git at other config or hooks, or
// unlocks a transport that runs commands. It errs on the side of reporting: a key
// that only runs a program for an explicit command (git send-email, git mergetool)
// still counts, since the operator may type that command.
//
// core.worktree is not in the list: it runs nothing, and whether it is dangerous
// depends on where it points, which only the audit knows (see auditor.config).
func Danger(e gitconfig.Entry) string {
	section, sub, key := e.Section, strings.ToLower(e.Subsection), e.Key
	value := strings.TrimSpace(e.Value)
	switch section {
	case "core":
		switch key {
		case "fsmonitor":
			// true/false select Git's built-in daemon or nothing; anything else is a
			// hook command Git runs on every status.
			if e.NoValue || isBoolString(value) {
				return ""
			}
			return "runs a program on every git status"
		case "hookspath":
			return "moves Git's hooks directory"
		case "sshcommand", "pager", "editor", "askpass", "gitproxy", "alternaterefscommand":
			if value != "" { // empty: Git falls back to its default
				return "names a program Git runs"
			}
		}
	case "sequence":
		if key == "editor" {
			return "names a program Git runs"
		}
	case "credential":
		if key == "helper" && value != "" { // an empty value only resets the list
			return "names a credential helper Git runs"
		}
	case "gpg":
		if key == "program" || key == "defaultkeycommand" {
			return "names a program Git runs to sign or verify"
		}
	case "diff":
		if key == "textconv" || key == "command" || key == "external" && sub == "" {
			return "names a diff program Git runs"
		}
	case "merge":
		if key == "driver" && sub != "" {
			return "names a merge driver Git runs"
		}
	case "filter":
		if key == "clean" || key == "smudge" || key == "process" {
			return "names a filter Git runs on checkout, add or status"
		}
	case "alias":
		if strings.HasPrefix(value, "!") {
			return "alias runs a shell command"
		}
	case "include", "includeif":
		if gitconfig.IsInclude(e) {
			return "makes Git read another config file"
		}
	case "uploadpack":
		if key == "packobjectshook" {
			return "names a program Git runs on upload-pack"
		}
	case "protocol":
		if key == "allow" {
			return "changes which transports (ext:: runs commands) Git allows"
		}
	case "remote":
		if key == "uploadpack" || key == "receivepack" {
			return "names the program Git runs for fetch or push"
		}
		if key == "vcs" && value != "" {
			return "names the remote helper (git-remote-" + oneLine(value) + ") Git runs for fetch or push"
		}
		if (key == "url" || key == "pushurl") && remoteHelper(value) != "" {
			return "names the remote helper git-remote-" + remoteHelper(value) + " Git runs for fetch or push"
		}
	case "submodule":
		if key == "update" && strings.HasPrefix(value, "!") {
			return "submodule update runs a shell command"
		}
	case "pager":
		// pager.<cmd> is a boolean or a pager command.
		if !e.NoValue && !isBoolString(value) {
			return "names a pager Git runs"
		}
	case "interactive":
		if key == "difffilter" {
			return "names a filter Git runs on git add -p"
		}
	case "trailer":
		if key == "command" || key == "cmd" {
			return "names a command Git runs to make trailers"
		}
	case "mergetool", "difftool":
		if key == "cmd" || key == "path" {
			return "names a program git " + section + " runs"
		}
	case "man", "browser":
		if key == "cmd" || key == "path" {
			return "names a program git help runs"
		}
	case "web":
		if key == "browser" {
			return "names a program git help runs"
		}
	case "sendemail":
		if key == "tocmd" || key == "cccmd" || key == "sendmailcmd" || key == "smtpserver" && strings.HasPrefix(value, "/") {
			return "names a program git send-email runs"
		}
	case "imap":
		if key == "tunnel" {
			return "names a command git imap-send runs"
		}
	case "instaweb":
		if key == "httpd" || key == "browser" {
			return "names a program git instaweb runs"
		}
	case "guitool":
		if key == "cmd" {
			return "names a command git gui runs"
		}
	case "init":
		if key == "templatedir" {
			return "copies its hooks into every repository Git creates"
		}
	case "pull":
		// pull.twohead and pull.octopus name the strategies git merge and git pull
		// use; each is run as git-merge-NAME.
		if key == "twohead" || key == "octopus" {
			for _, name := range strings.Fields(value) {
				if d := strategyDanger(name, "git merge"); d != "" {
					return d
				}
			}
		}
	case "gc":
		if key == "recentobjectshook" {
			return "names a program git gc runs"
		}
	case "tar":
		if key == "command" {
			return "names a compressor git archive runs"
		}
	case "url":
		// url.BASE.insteadOf rewrites matching URLs to BASE, which may name a
		// remote helper (HELPER::ADDRESS).
		if (key == "insteadof" || key == "pushinsteadof") && remoteHelper(e.Subsection) != "" {
			return "rewrites URLs to the remote helper git-remote-" + remoteHelper(e.Subsection)
		}
	case "lfs":
		// Git LFS reads the same config: custom transfer agents and extensions are
		// programs it runs on fetch, push and checkout.
		if key == "path" || key == "clean" || key == "smudge" {
			return "names a program Git LFS runs"
		}
	}
	return ""
}

// isBoolString reports whether Git reads v as a boolean (an empty value is false).
func isBoolString(v string) bool {
	switch strings.ToLower(v) {
	case "", "true", "false", "yes", "no", "on", "off", "1", "0":
		return true
	}
	return false
}

// describe renders a dangerous entry for a report line, on one line and bounded.
func describe(e gitconfig.Entry, why string) string {
	if e.NoValue {
		return fmt.Sprintf("%s (%s)", e.Name(), why)
	}
	v := e.Value
	if len(v) > 120 {
		v = v[:120] + "…"
	}
	return fmt.Sprintf("%s = %q (%s)", e.Name(), v, why)
}
