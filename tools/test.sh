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
# The tests that skipped themselves, each with the reason it gave (GTEST_SKIP
# or exit 77), from ctest's log of this run.
log="$root/build/$preset/Testing/Temporary/LastTest.log"
if [ -f "$log" ]; then
  awk '/^[0-9]+\/[0-9]+ Testing: / { name = $3 }
       /: Skipped$/ { want = 1; next }
       want { reasons[name] = $0; want = 0 }
       /^\[  SKIPPED \] [[:alnum:]_]+\.[[:alnum:]_]+ \(/ && !($4 in reasons) { reasons[$4] = "(no reason given)" }
       /^Test Skipped|^Test Not Run/ && name != "" && !(name in reasons) { reasons[name] = "(skipped)" }
       END { n = 0; for (t in reasons) n++
             printf "test.sh: %d test(s) skipped%s\n", n, n ? ":" : ""
             for (t in reasons) printf "  %s: %s\n", t, reasons[t] }' "$log"
fi
exit "$status"
