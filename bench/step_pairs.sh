# Sourced by the benchmarks that compare two ways of running the same
# training step (bench/curve_step.sh, bench/norm_guard_step.sh): each round
# runs both through dctrain-launch, in turn (the order swapped every other
# round, so that a busy machine weighs on both alike), and the figure of a
# run is the median over its steps (the first two left out: warm-up) of the
# step's full cycle, the wall time from one step's end to the next.
#
# The caller sets `here` (bench/), `build`, `steps` and `rounds`, calls
#   pairs_setup NAME   (sets `launch`, `data` and a scratch folder `work`,
#                       removed on exit; NAME prefixes its messages)
# and defines
#   run_mode MODEL MODE OUT   start one run of MODE into OUT (its log: OUT.log)
# then calls
#   compare_modes MODEL BASELINE OTHER LABEL
# which prints one line per round (both cycles and OTHER/BASELINE) and a
# RESULT line with the median ratio.

# Median full-cycle and plans-to-last-contribution step times (ms) of a run
# folder.
step_figures() {
  /usr/bin/python3 - "$1/metrics.jsonl" <<'PY'
import json, statistics, sys
steps = [r for r in map(json.loads, open(sys.argv[1])) if r.get("type") == "step"]
ends = [r["wall_seconds"] for r in steps]
cycle = [b - a for a, b in zip(ends, ends[1:])][2:]
step = [r["step_seconds"] for r in steps][2:]
print(f"{statistics.median(cycle) * 1e3:.1f} {statistics.median(step) * 1e3:.1f}")
PY
}

compare_modes() {
  local model="$1" baseline="$2" other="$3" label="$4"
  local ratios=() r mode line cycle step ratio median
  declare -A cycles
  for ((r = 1; r <= rounds; r++)); do
    line="$model round $r:"
    local modes=("$baseline" "$other")
    ((r % 2 == 0)) && modes=("$other" "$baseline")
    for mode in "${modes[@]}"; do
      run_mode "$model" "$mode" "$work/$model-$r-$mode"
      read -r cycle step < <(step_figures "$work/$model-$r-$mode")
      cycles[$mode]=$cycle
      line="$line $mode cycle ${cycle} ms (plans to last contribution ${step} ms);"
    done
    ratio=$(awk -v a="${cycles[$other]}" -v b="${cycles[$baseline]}" 'BEGIN { printf "%.3f", a / b }')
    ratios+=("$ratio")
    echo "$line $other/$baseline $ratio"
  done
  median=$(printf '%s\n' "${ratios[@]}" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
  echo "RESULT $model: step cycle $label = ${median}x (median of $rounds rounds)"
}

pairs_setup() {
  local name="$1"
  data="$here/../../shared/data"
  launch="$build/bin/dctrain-launch"
  [[ -x "$launch" ]] || { echo "$name: $launch not found; build first (bash tools/setup.sh)" >&2; exit 1; }
  [[ -d "$data" ]] || { echo "$name: no data root at $data" >&2; exit 1; }
  work="$(mktemp -d "/tmp/dctrain-$name.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
}
