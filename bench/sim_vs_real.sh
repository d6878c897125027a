#!/usr/bin/env bash
# dctrain-simulate against real runs, same configs and seeds, side by side:
# the MLP of experiments/synthetic-mlp.cfg at 4 workers (or each count
# given) with the demo's delays (20 ms slept per micro-batch stands for the
# compute), 4 micro-batches of 8 per worker a step (16 at 4 workers).
#   dropcompute  the paper's log-normal delays: tau = inf against auto tau
#                (speedup and drop rate over the whole run, the warm-up at
#                inf included: auto tau re-estimates every 10 steps, so the
#                steps at its final tau can be a handful);
#   straggler    worker 0 twice as slow: sync against rebalance (speedup).
# Real runs go through dctrain-launch (one process per worker on this
# host's cores);
# their twins through dctrain-simulate with --sample-seconds for the MLP's
# own compute (measured here as 1 ms a micro-batch of 8, beside the 20 ms
# slept). Prints each figure real and simulated and their ratio.
#
# The mean step at tau = inf, real and simulated, checks the network model
# of the data plane (sim/network.h) beside the compute.
#
#   bash bench/sim_vs_real.sh [build dir, default build/release] [steps, default 60] \
#        [seeds, default "1 2"] [workers, default "4"] [data planes, default "star"]
# The build dir holds bin/dctrain-launch, dctrain-coordinator, dctrain-worker
# and dctrain-simulate.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${1:-$here/../build/release}"
steps="${2:-60}"
seeds="${3:-1 2}"
worker_counts="${4:-4}"
planes="${5:-star}"
for program in dctrain-launch dctrain-simulate; do
  [[ -x "$build/bin/$program" ]] || { echo "sim_vs_real: $build/bin/$program not found; build first" >&2; exit 1; }
done
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1), $(nproc) cores shared by the workers ($worker_counts) and the coordinator"

config() {  # NAME SEED DELAY STEP WORKERS PLANE
  cat >"$scratch/$1.cfg" <<EOF
name: "$1"
seed: $2
workers: $5
model { name: "mlp" }
dataset { kind: "synthetic" synthetic_samples: 10000 }
optimizer { kind: "sgd" lr: 0.05 momentum: 0.9 }
step { global_batch: $((32 * $5)) micro_batch: 8 $4 }
delay { $3 }
eval { every_steps: 1000 batch: 500 }
stop { max_steps: $steps }
data_plane { kind: "$6" }
EOF
}
field() {  # RUN_DIR KEY: a number of summary.json (no python needed)
  tr ',{}' '\n\n\n' <"$1/summary.json" | sed -n "s/^[[:space:]]*\"$2\":[[:space:]]*\([-+0-9.eE]*\).*/\1/p" | head -n 1
}
run_both() {  # NAME
  "$build/bin/dctrain-launch" --config "$scratch/$1.cfg" --out "$scratch/real-$1" >/dev/null 2>&1 ||
    { echo "sim_vs_real: the real run $1 failed (its folder: $scratch/real-$1)" >&2; exit 1; }
  "$build/bin/dctrain-simulate" --config "$scratch/$1.cfg" --out "$scratch/sim-$1" \
    --sample-seconds 0.000125 --log-level warn >/dev/null
}

printf '%-9s %-8s %-12s %-5s %-26s %10s %10s %8s\n' plane workers case seed figure real simulated ratio
for plane in $planes; do
for workers in $worker_counts; do
for seed in $seeds; do
  lognormal='kind: "dropcompute" factor: 1 seconds: 0.02'
  straggler='kind: "constant" seconds: 0.02 slow_workers: [0] slowdown: 2'
  config "dc-inf-$seed" "$seed" "$lognormal" "tau: inf" "$workers" "$plane"
  config "dc-auto-$seed" "$seed" "$lognormal" "tau: inf tau_policy: \"auto\"" "$workers" "$plane"
  config "st-sync-$seed" "$seed" "$straggler" "tau: inf" "$workers" "$plane"
  config "st-rebalance-$seed" "$seed" "$straggler" "tau: inf policy: \"rebalance\"" "$workers" "$plane"
  for name in "dc-inf-$seed" "dc-auto-$seed" "st-sync-$seed" "st-rebalance-$seed"; do
    rm -rf "$scratch/real-$name" "$scratch/sim-$name"
    run_both "$name"
  done
  for side in real sim; do
    inf="$(field "$scratch/$side-dc-inf-$seed" mean_step_seconds)"
    auto="$(field "$scratch/$side-dc-auto-$seed" mean_step_seconds)"
    drop="$(field "$scratch/$side-dc-auto-$seed" drop_rate)"
    sync="$(field "$scratch/$side-st-sync-$seed" mean_step_seconds)"
    rebalance="$(field "$scratch/$side-st-rebalance-$seed" mean_step_seconds)"
    declare "${side}_inf=$(awk -v a="$inf" 'BEGIN { printf "%.1f", 1000 * a }')"
    declare "${side}_dc=$(awk -v a="$inf" -v b="$auto" 'BEGIN { printf "%.3f", a / b }')"
    declare "${side}_drop=$(awk -v d="$drop" 'BEGIN { printf "%.1f", 100 * d }')"
    declare "${side}_st=$(awk -v a="$sync" -v b="$rebalance" 'BEGIN { printf "%.3f", a / b }')"
  done
  ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b / a }'; }
  row() { printf '%-9s %-8s %-12s %-5s %-26s %10s %10s %8s\n' "$plane" "$workers" "$@"; }
  row dropcompute "$seed" "mean step, tau inf" "${real_inf} ms" "${sim_inf} ms" "$(ratio "$real_inf" "$sim_inf")"
  row dropcompute "$seed" "auto tau over inf" "${real_dc}x" "${sim_dc}x" "$(ratio "$real_dc" "$sim_dc")"
  row dropcompute "$seed" "drop rate, auto tau" "${real_drop}%" "${sim_drop}%" "$(awk -v a="$real_drop" -v b="$sim_drop" 'BEGIN { printf "%+.1f pt", b - a }')"
  row straggler "$seed" "rebalance over sync" "${real_st}x" "${sim_st}x" "$(ratio "$real_st" "$sim_st")"
done
done
done
