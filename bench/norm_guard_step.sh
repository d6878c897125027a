#!/usr/bin/env bash
# What the exchange's norm guard costs on a training step: bert-tiny (MLM)
# and resnet20 (CIFAR-10), 4 workers on this host through dctrain-launch on
# the default data plane (the exchange), each run once without the guard and
# once with `guard { norm_multiple: 10 }` (each round: once the members
# agree on the sum, a sketch of every member's part, asked for and checked
# before the commit; coordinator/sketch_check.h), the two taken in turn in
# each round so that a busy machine weighs on both alike. A run's figure is
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
data="$here/../../shared/data"
launch="$build/bin/dctrain-launch"
[[ -x "$launch" ]] || { echo "norm_guard_step: $launch not found; build first (bash tools/setup.sh)" >&2; exit 1; }
[[ -d "$data" ]] || { echo "norm_guard_step: no data root at $data" >&2; exit 1; }
work="$(mktemp -d /tmp/dctrain-norm-guard-bench.XXXXXX)"
trap 'rm -rf "$work"' EXIT

# Median full-cycle step time (ms) of a run folder.
cycle() {
  /usr/bin/python3 - "$1/metrics.jsonl" <<'PY'
import json, statistics, sys
steps = [r for r in map(json.loads, open(sys.argv[1])) if r.get("type") == "step"]
ends = [r["wall_seconds"] for r in steps]
print(f"{statistics.median([b - a for a, b in zip(ends, ends[1:])][2:]) * 1e3:.1f}")
PY
}

echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1), $(nproc) cores shared by the coordinator and 4 workers"
echo "steps per run: $steps (figures over the last $((steps - 3)) step cycles), rounds: $rounds"
for model in $models; do
  cp "$here/../experiments/$model.cfg" "$work/$model-plain.cfg"
  { cat "$here/../experiments/$model.cfg"; echo 'guard { norm_multiple: 10 }'; } >"$work/$model-guarded.cfg"
  ratios=()
  for ((r = 1; r <= rounds; r++)); do
    line="$model round $r:"
    modes=(plain guarded)
    ((r % 2 == 0)) && modes=(guarded plain)
    for mode in "${modes[@]}"; do
      out="$work/$model-$r-$mode"
      "$launch" --workers 4 --config "$work/$model-$mode.cfg" --data-dir "$data" \
        --steps "$steps" --out "$out" >"$out.log" 2>&1 || {
        tail -n 20 "$out.log"; echo "norm_guard_step: the $mode run of $model failed" >&2; exit 1
      }
      if [[ "$mode" == guarded ]] && grep -q "is refused" "$out/coordinator.log"; then
        echo "($model: the guard refused an honest contribution: $(grep -m1 'is refused' "$out/coordinator.log"))"
      fi
      c=$(cycle "$out")
      eval "${mode}_cycle=$c"
      line="$line $mode ${c} ms;"
    done
    ratio=$(awk -v a="$guarded_cycle" -v b="$plain_cycle" 'BEGIN { printf "%.3f", a / b }')
    ratios+=("$ratio")
    echo "$line guarded/plain $ratio"
  done
  median=$(printf '%s\n' "${ratios[@]}" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
  echo "RESULT $model: step cycle with the norm guard / without = ${median}x (median of $rounds rounds)"
done
