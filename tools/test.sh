#!/usr/bin/env bash
# The whole test suite: set up (install + build), then run every CTest test.
#   tools/test.sh [--preset release|debug-asan] [extra ctest arguments]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
preset=release
if [ "${1:-}" = "--preset" ]; then preset="$2"; shift 2; fi
"$root/tools/setup.sh" --preset "$preset"
cd "$root"
start=$SECONDS
status=0
ctest --preset "$preset" -j"$(nproc)" "$@" || status=$?
echo "test.sh: the suite took $((SECONDS - start)) s on $(nproc) cores (ctest exit $status)"
exit "$status"
