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
data="$here/../../shared/data"
launch="$build/bin/dctrain-launch"
[[ -x "$launch" ]] || { echo "curve_step: $launch not found; build first (bash tools/setup.sh)" >&2; exit 1; }
[[ -d "$data" ]] || { echo "curve_step: no data root at $data" >&2; exit 1; }
work="$(mktemp -d /tmp/dctrain-curve-bench.XXXXXX)"
trap 'rm -rf "$work"' EXIT

# Median full-cycle and compute-to-contribution step times (ms) of a run folder.
figures() {
  /usr/bin/python3 - "$1/metrics.jsonl" <<'PY'
import json, statistics, sys
steps = [r for r in map(json.loads, open(sys.argv[1])) if r.get("type") == "step"]
ends = [r["wall_seconds"] for r in steps]
cycle = [b - a for a, b in zip(ends, ends[1:])][2:]
step = [r["step_seconds"] for r in steps][2:]
print(f"{statistics.median(cycle) * 1e3:.1f} {statistics.median(step) * 1e3:.1f}")
PY
}

echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1), $(nproc) cores shared by the coordinator and 4 workers"
echo "steps per run: $steps (figures over the last $((steps - 3)) step cycles), rounds: $rounds"
for model in $models; do
  ratios=()
  for ((r = 1; r <= rounds; r++)); do
    line="$model round $r:"
    modes=(plain curve)
    ((r % 2 == 0)) && modes=(curve plain)
    for mode in "${modes[@]}"; do
      flags=()
      [[ "$mode" == curve ]] && flags=(--curve)
      out="$work/$model-$r-$mode"
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
      read -r cycle step < <(figures "$out")
      eval "${mode}_cycle=$cycle ${mode}_step=$step"
      line="$line $mode cycle ${cycle} ms (plans to last contribution ${step} ms);"
    done
    ratio=$(awk -v a="$curve_cycle" -v b="$plain_cycle" 'BEGIN { printf "%.3f", a / b }')
    ratios+=("$ratio")
    echo "$line curve/plain $ratio"
  done
  median=$(printf '%s\n' "${ratios[@]}" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
  echo "RESULT $model: step cycle with CURVE / plain = ${median}x (median of $rounds rounds)"
done
