#!/bin/sh
# test.sh is the project's whole test run, as the README gives it and CI calls it.
# Run it as root on a Debian 12 machine: it installs what the tests need (packages,
# bubblewrap 0.12.0 built from source, the unprivileged test user), checks the code,
# then runs every Go test. The tests drop to the unprivileged user themselves.
set -eu
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
export CGO_ENABLED=0

[ "$(id -u)" = 0 ] || { echo "test.sh: run as root (sudo scripts/test.sh)" >&2; exit 1; }

sh scripts/setup-test-env.sh

echo "== build (CGO_ENABLED=0), gofmt, go vet"
go build ./...
unformatted=$(gofmt -l $(git ls-files '*.go'))
if [ -n "$unformatted" ]; then
	echo "not gofmt-clean: $unformatted" >&2
	exit 1
fi
go vet ./...
GOBIN=/var/cache/agentbox-test/bin go install honnef.co/go/tools/cmd/staticcheck@v0.8.2
/var/cache/agentbox-test/bin/staticcheck ./...
# The same for arm64: architecture-specific files (the raw init is amd64 only) must
# leave nothing unused or unvetted elsewhere.
GOARCH=arm64 go vet ./...
GOARCH=arm64 /var/cache/agentbox-test/bin/staticcheck ./...
# The plan and its translations are pure (policy, mounts, overlay, compat's argv): they must
# build off Linux, with the kernel work kept in _linux.go files.
GOOS=darwin go build ./policy ./mounts/... ./overlay ./compat ./backend
GOOS=darwin go vet ./policy ./mounts/... ./overlay ./compat ./backend

echo "== fuzz: every target for ${FUZZ_SECONDS:-60} s"
sh scripts/fuzz.sh "${FUZZ_SECONDS:-60}"

# Everything a test can need is installed above: a test that would skip fails.
export AGENTBOX_TEST_STRICT=1

echo "== kernel matrix (qemu)"
sh scripts/kmatrix.sh

echo "== go test"
# The host-socket crowd rows run on their own, after: while they hold hundreds of
# sockets, every launch elsewhere on the machine is refused, as it must be.
go test -count=1 -timeout 25m -skip '^TestHostSocketCrowds$' ./...
go test -count=1 -timeout 10m -run '^TestHostSocketCrowds$' ./test/adversarial/

echo "== behaviour table and nsinit with -race"
# A -race agentbox launches with the Go init (no raw init under the race tag): the
# behaviour table checks that build end to end, with the race detector in the
# launcher (testenv builds agentbox with -race for a -race test binary), and nsinit's
# race-only test checks that a launch asking for the raw init gets the Go init. About
# four minutes on a loaded 2-core machine, most of it the two -race builds.
CGO_ENABLED=1 go test -race -count=1 -timeout 15m -run '^TestPromises$' ./test/behaviour/
CGO_ENABLED=1 go test -race -count=1 -timeout 10m ./nsinit/
