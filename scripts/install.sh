#!/bin/sh
# install.sh builds agentbox from this clone and installs it for the calling user:
#   $PREFIX/bin/agentbox                                  (PREFIX defaults to ~/.local)
#   $PREFIX/share/bash-completion/completions/agentbox    bash completion
#   $PREFIX/share/zsh/site-functions/_agentbox            zsh completion
#   $PREFIX/share/fish/vendor_completions.d/agentbox.fish fish completion
#   $PREFIX/share/man/man1/agentbox.1                     the manual
# It needs Go 1.26 or newer (go on PATH, or /usr/local/go/bin/go) and nothing else;
# the binary is static (CGO_ENABLED=0). Nothing is written outside PREFIX.
set -eu
cd "$(dirname "$0")/.."
PREFIX=${PREFIX:-$HOME/.local}

die() { printf 'install.sh: %s\n' "$*" >&2; exit 1; }

# bash_completion_present: the bash-completion package's loader is installed (the
# paths Debian, Fedora, Arch and Homebrew use).
bash_completion_present() {
	for f in /usr/share/bash-completion/bash_completion \
		/etc/bash_completion /usr/local/share/bash-completion/bash_completion \
		/opt/homebrew/share/bash-completion/bash_completion; do
		[ -r "$f" ] && return 0
	done
	return 1
}

GO=$(command -v go || true)
[ -n "$GO" ] || GO=/usr/local/go/bin/go
[ -x "$GO" ] || die "Go not found: install Go 1.26 or newer (https://go.dev/dl/) and put it on PATH"
ver=$("$GO" env GOVERSION) || die "$GO does not run"
minor=$(printf '%s\n' "$ver" | sed -n 's/^go1\.\([0-9]*\).*/\1/p')
[ -n "$minor" ] && [ "$minor" -ge 26 ] || die "$ver is too old: agentbox needs Go 1.26 or newer"

mkdir -p "$PREFIX/bin"
# Built to a temporary name and renamed: an agentbox that is running is never
# half-overwritten.
CGO_ENABLED=0 "$GO" build -trimpath -o "$PREFIX/bin/.agentbox.new" ./cmd/agentbox
mv -f "$PREFIX/bin/.agentbox.new" "$PREFIX/bin/agentbox"
bin=$PREFIX/bin/agentbox

mkdir -p "$PREFIX/share/bash-completion/completions" "$PREFIX/share/zsh/site-functions" \
	"$PREFIX/share/fish/vendor_completions.d" "$PREFIX/share/man/man1"
"$bin" completion bash >"$PREFIX/share/bash-completion/completions/agentbox"
"$bin" completion zsh >"$PREFIX/share/zsh/site-functions/_agentbox"
"$bin" completion fish >"$PREFIX/share/fish/vendor_completions.d/agentbox.fish"
"$bin" man >"$PREFIX/share/man/man1/agentbox.1"

printf 'installed %s (%s)\n' "$bin" "$("$bin" version)"
# bash loads completions from $PREFIX/share/bash-completion only through the
# bash-completion package (which searches ~/.local/share, XDG_DATA_DIRS and PATH's
# share dirs); without it, nothing loads the file.
if command -v bash >/dev/null 2>&1 && ! bash_completion_present; then
	printf 'bash completion: the bash-completion package is not installed, so bash will not load %s\n' \
		"$PREFIX/share/bash-completion/completions/agentbox"
	printf '  install it (sudo apt-get install bash-completion), or add to ~/.bashrc: . %s\n' \
		"$PREFIX/share/bash-completion/completions/agentbox"
fi
case ":$PATH:" in
*":$PREFIX/bin:"*) ;;
*) printf 'add it to PATH: export PATH="%s/bin:$PATH"\n' "$PREFIX" ;;
esac
printf 'check this machine: agentbox doctor\n'
