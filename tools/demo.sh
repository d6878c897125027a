#!/usr/bin/env bash
# The main job: set up (install + build the programs), then a short sweep on generated
# data (experiments/demo.sweep: the MLP, 4 local workers, a persistent 3x
# straggler and a worker at a quarter of the CPU quota of the others (real
# slowness: needs root); plain synchronous SGD against DropCompute's
# automatic threshold and speed-aware shares, six seeds, to 90% accuracy),
# then its report (time to target first, with 95% intervals and p-values,
# gnuplot plots), printing the tables. About 3.5 minutes on a 2-core
# machine after the build.
#   tools/demo.sh            into runs/demo
#   tools/demo.sh DIR        into DIR (a fresh folder runs the sweep anew)
# Finished cases are kept: a second run into the same folder only reprints
# the report. The installation and build take one line each here; their
# output is in runs/setup.log.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
case "${1:-}" in
  -h|--help) sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
out="${1:-runs/demo}"
"$root/tools/setup.sh" --programs --log "$root/runs/setup.log"
build="$root/build/release"
cd "$root"
start=$SECONDS
status=0
# A case that cannot run (the CPU-quota case without root) is named by the
# sweep; the report shows the others.
"$build/bin/dctrain-experiment" experiments/demo.sweep --out "$out" || status=$?
"$build/bin/dctrain-report" "$out" --out "$out/report"
echo "demo: sweep and report in $((SECONDS - start)) s (2 cores are shared by the 4 workers" \
  "and the coordinator: the speedups are ratios measured side by side, not device figures)"
exit "$status"
