#!/usr/bin/env bash
# The main job: set up (install + build), then a local coordinator and 4
# workers (dctrain-launch) on the built-in synthetic dataset with the
# DropCompute paper's delay model, then the baseline-vs-DropCompute table
# (tau = infinity against tau at the 90th percentile of compute times).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/tools/setup.sh"
build="$root/build/release"
cd "$root"
"$build/bin/dctrain-launch" --workers 4 --config experiments/synthetic-mlp.cfg --out runs/demo
"$build/bench/bench_runtime_dropcompute" --steps 30 --rounds 2
