#!/usr/bin/env bash
# What CURVE costs on a training step: resnet20 (CIFAR-10) and bert-tiny
# (MLM), 4 workers on this host through dctrain-launch, each run once in
# plain TCP and once with --curve (throwaway keys; every byte between the
# coordinator and the workers encrypted and authenticated), the two taken in
# turn in each round so that a busy machine weighs on both alike. A run's
# figure is the median over its steps (the first two left out: warm-up) of
# the step's full cycle, the wall time from one step's end to the next
# (plans, compute, contributions, reduce, update, the update sent);
# printed per round with the ratio curve / plain, then the median ratio.
#
#   bash bench/curve_step.sh [build dir, default build/release] [steps, default 12] [rounds, default 3]
#                            [models, default "resnet20 bert-tiny"]
#
# Needs the data root ../shared/data (cifar-10-*, text/, bert-base-uncased/)
# and /usr/bin/python3 (to read metrics.jsonl).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${1:-$here/../build/release}"
steps="${2:-12}"
rounds="${3:-3}"
models="${4:-resnet20 bert-tiny}"
source "$here/step_pairs.sh"
pairs_setup curve_step

run_mode() {
  local model="$1" mode="$2" out="$3" flags=()
  [[ "$mode" == curve ]] && flags=(--curve)
  "$launch" --workers 4 --config "$here/../experiments/$model.cfg" --data-dir "$data" \
    --steps "$steps" --out "$out" "${flags[@]}" >"$out.log" 2>&1 || {
    # A worker that falls silent on a loaded machine may be refused at
    # the very end (after the last step): the steps still count.
    done_steps=$(grep -c '"type":"step"' "$out/metrics.jsonl" 2>/dev/null || echo 0)
    if [[ "$done_steps" != "$steps" ]]; then
      tail -n 20 "$out.log"; echo "curve_step: the $mode run of $model failed" >&2; exit 1
    fi
    echo "($model $mode: the launcher failed after all $steps steps: $(grep -c 'exited with status' "$out.log") processes exited non-zero; figures kept)"
  }
  if [[ "$mode" == curve ]]; then
    grep -q "security: CURVE on every connection" "$out/coordinator.log" ||
      { echo "curve_step: the --curve run did not use CURVE" >&2; exit 1; }
  fi
}

echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1), $(nproc) cores shared by the coordinator and 4 workers"
echo "steps per run: $steps (figures over the last $((steps - 3)) step cycles), rounds: $rounds"
for model in $models; do
  compare_modes "$model" plain curve "with CURVE / plain"
done
