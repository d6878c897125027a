#!/usr/bin/env bash
# The main job: set up (install + build), then a short sweep on generated
# data (experiments/demo.sweep: the MLP, 4 local workers, a persistent 2x
# straggler and the DropCompute paper's delays; plain synchronous SGD
# against DropCompute's automatic threshold and speed-aware shares, four
# seeds), then its report (tables with 95% intervals and p-values, the
# predicted speedup beside the measured one, gnuplot plots), printing the
# tables. About 3 minutes on a 2-core machine after the build.
#   tools/demo.sh            into runs/demo
#   tools/demo.sh DIR        into DIR (a fresh folder runs the sweep anew)
# Finished cases are kept: a second run into the same folder only reprints
# the report. The installation and build take one line each here; their
# output is in runs/setup.log.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
case "${1:-}" in
  -h|--help) sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
out="${1:-runs/demo}"
"$root/tools/setup.sh" --log "$root/runs/setup.log"
build="$root/build/release"
cd "$root"
start=$SECONDS
"$build/bin/dctrain-experiment" experiments/demo.sweep --out "$out"
"$build/bin/dctrain-report" "$out" --out "$out/report"
echo "demo: sweep and report in $((SECONDS - start)) s (2 cores are shared by the 4 workers" \
  "and the coordinator: the speedups are ratios measured side by side, not device figures)"
