#!/bin/sh
# fuzz.sh runs every Go fuzz target of the module for a while, two at a time (CI has
# two cores): each target gets -parallel 1, so two fuzzers keep both cores busy.
#
#   scripts/fuzz.sh [SECONDS]      default 60 (the CI minimum per target)
#
# Targets are found with `go test -list`, so a new Fuzz* function is fuzzed without
# editing this script. New inputs that crash land in the package's testdata/fuzz/
# (commit them with the fix); the committed corpus there is replayed by plain
# `go test` as well. The summary gives each target's executions; the script fails
# when any target fails.
set -eu
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
export CGO_ENABLED=0

secs=${1:-${FUZZTIME:-60}}
logs=$(mktemp -d "${TMPDIR:-/tmp}/agentbox-fuzz.XXXXXX")
trap 'rm -rf "$logs"' EXIT

targets="$logs/targets"
for pkg in $(go list ./...); do
	# A package that does not build must not drop its targets silently.
	list=$(go test -list '^Fuzz' "$pkg") || { echo "fuzz.sh: cannot list the tests of $pkg" >&2; exit 1; }
	for fn in $(echo "$list" | grep '^Fuzz' || true); do
		echo "$pkg $fn" >>"$targets"
	done
done
[ -s "$targets" ] || { echo "fuzz.sh: no fuzz targets found" >&2; exit 1; }

echo "== fuzzing $(wc -l <"$targets") targets, ${secs}s each, two at a time"
# Each line: package and target; one go test per target, its log named after both.
# shellcheck disable=SC2016
xargs -P 2 -L 1 sh -c '
	log="$0/$(echo "$2.$3" | tr / _).log"
	if go test "$2" -run "^$" -fuzz "^$3\$" -fuzztime "$1s" -parallel 1 >"$log" 2>&1; then
		echo "ok   $2 $3"
	else
		echo "FAIL $2 $3"; cat "$log"; exit 1
	fi' "$logs" "$secs" <"$targets" || status=$?

# Summary: executions per target, from the fuzzer's last progress line.
total=0
for log in "$logs"/*.log; do
	execs=$(grep -o 'execs: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || echo 0)
	total=$((total + execs))
	printf '%12d  %s\n' "$execs" "$(basename "$log" .log)"
done
printf '%12d  total executions\n' "$total"
exit "${status:-0}"
