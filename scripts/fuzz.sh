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
#
# -fuzzminimizetime: the fuzzer minimizes every input that finds new coverage, for
# up to a minute by default, and executes nothing new meanwhile; ten seconds keeps
# the time for fuzzing. A crasher is still written, minimized or not.
#
# Go 1.26's coordinator can fail a target whose -fuzztime has simply run out: when
# its deadline fires, it compares the error with the workers' context before that
# context has been cancelled, and reports "context deadline exceeded"
# (go.dev/issue/75804, fixed in Go 1.27). That failure, and only that one, is
# accepted: the log's only failure is that line, no failing input was written, and
# the target ran its whole time. Every real finding (a crash, a hang, a failing
# input) still fails the run.
# shellcheck disable=SC2016
xargs -P 2 -L 1 sh -c '
	log="$0/$(echo "$2.$3" | tr / _).log"
	if go test "$2" -run "^$" -fuzz "^$3\$" -fuzztime "$1s" -fuzzminimizetime 10s -parallel 1 >"$log" 2>&1; then
		echo "ok   $2 $3"
	elif [ "$(grep -c -e "^--- FAIL" -e "Failing input" -e "hung or terminated" -e "^panic" "$log")" = 1 ] &&
		[ "$(grep -A1 "^--- FAIL: $3 " "$log" | tail -1)" = "    context deadline exceeded" ] &&
		ran=$(sed -n "s/^--- FAIL: $3 (\([0-9]*\)\.[0-9]*s)\$/\1/p" "$log") &&
		[ "${ran:-0}" -ge "$1" ]; then
		echo "ok   $2 $3 (its time ran out into go.dev/issue/75804; no failing input)"
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
