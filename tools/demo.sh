#!/usr/bin/env bash
# The main job: set up (install + build), then a short sweep on generated
# data (experiments/demo.sweep: the MLP, 4 local workers, DropCompute delays
# and a persistent straggler; tau = infinity against percentile and automatic
# thresholds, with requeue), then its report (tables and gnuplot plots),
# printing the tables. Finished cases are kept: a second run only reprints
# the report (delete runs/demo to run the sweep again). The installation and
# build take one line each here; their output is in runs/setup.log.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/tools/setup.sh" --log "$root/runs/setup.log"
build="$root/build/release"
cd "$root"
"$build/bin/dctrain-experiment" experiments/demo.sweep --out runs/demo
"$build/bin/dctrain-report" runs/demo --out runs/demo/report
