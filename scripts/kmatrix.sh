#!/bin/sh
# kmatrix.sh runs agentbox's kernel matrix: every pinned Debian kernel (5.10, 6.1,
# 6.12, 7.x, plus 5.10 with the overlay option and 6.12 with unprivileged user
# namespaces switched off) booted in qemu, with doctor, the kernel probe tests, the
# smoke tests and the kernel-sensitive behaviour rows run inside as an unprivileged
# user. It prints a table, writes one JSON per cell and stores the result through
# the shadow collector.
#
# Needs what scripts/setup-test-env.sh installs (qemu-system-x86, xz-utils, dpkg)
# and a writable /var/cache/agentbox-test/kernels (run as root in CI). The first run
# downloads about 360 MB of kernel packages; later runs need no network.
#
# Usage: scripts/kmatrix.sh [kmatrix flags]     e.g. -cells bookworm-6.1 or -full
# Results: $KMATRIX_OUT (default /var/tmp/kmatrix-out). Exit status: 0 all cells
# passed, 1 a cell failed, 125 the matrix could not run.
set -eu
cd "$(dirname "$0")/.."
out=${KMATRIX_OUT:-/var/tmp/kmatrix-out}
exec go run ./cmd/kmatrix -out "$out" "$@"
