#!/usr/bin/env bash
# What the exchange's norm guard costs on a training step: bert-tiny (MLM)
# and resnet20 (CIFAR-10), 4 workers on this host through dctrain-launch on
# the default data plane (the exchange), each run once without the guard
# (`guard { norm_multiple: 0 }`) and once with the defaults, where it is on
# (each round: once the members
# agree on the sum, a sketch of every member's part, asked for and checked
# before the commit; coordinator/planes/round_check.h), the two taken in turn in
# each round so that a busy machine weighs on both alike (bench/step_pairs.sh). A run's figure is
# the median over its steps (the first two left out: warm-up) of the step's
# full cycle, the wall time from one step's end to the next; printed per
# round with the ratio guarded / plain, then the median ratio.
#
#   bash bench/norm_guard_step.sh [build dir, default build/release] [steps, default 12]
#                                 [rounds, default 3] [models, default "bert-tiny resnet20"]
#
# Needs the data root ../shared/data and /usr/bin/python3 (to read metrics.jsonl).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${1:-$here/../build/release}"
steps="${2:-12}"
rounds="${3:-3}"
models="${4:-bert-tiny resnet20}"
source "$here/step_pairs.sh"
pairs_setup norm_guard_step

run_mode() {
  local model="$1" mode="$2" out="$3"
  "$launch" --workers 4 --config "$work/$model-$mode.cfg" --data-dir "$data" \
    --steps "$steps" --out "$out" >"$out.log" 2>&1 || {
    tail -n 20 "$out.log"; echo "norm_guard_step: the $mode run of $model failed" >&2; exit 1
  }
  if [[ "$mode" == guarded ]] && grep -q "is refused" "$out/coordinator.log"; then
    echo "($model: the guard refused an honest contribution: $(grep -m1 'is refused' "$out/coordinator.log"))"
  fi
}

echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1), $(nproc) cores shared by the coordinator and 4 workers"
echo "steps per run: $steps (figures over the last $((steps - 3)) step cycles), rounds: $rounds"
for model in $models; do
  { cat "$here/../experiments/$model.cfg"; echo 'guard { norm_multiple: 0 }'; } >"$work/$model-plain.cfg"
  cp "$here/../experiments/$model.cfg" "$work/$model-guarded.cfg"
  compare_modes "$model" plain guarded "with the norm guard / without"
done
