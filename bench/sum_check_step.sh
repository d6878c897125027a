#!/usr/bin/env bash
# What the exchange's sum checks cost on a training step: bert-tiny (MLM,
# 17.5 MB of gradient), 2 workers on this host through dctrain-launch on the
# default data plane, tau = inf, each run with the sum digests off
# (`data_plane { check_sums: false }`), with BLAKE2b, with SHA-256 and with
# GMAC's keyed tags (`data_plane { sum_digest: ... }`; the default picks GMAC
# where every CPU has a carry-less multiply), the four taken in a rotating
# order in each round so that a busy machine weighs on all alike. A run's figures, medians
# over its steps (the first two left out: warm-up): the step's full cycle
# (the wall time from one step's end to the next) and the time outside
# compute (the cycle less the slower worker's compute). Prints each run,
# then per mode the median over rounds and its share of the cycle.
#
#   bash bench/sum_check_step.sh [build dir, default build/release] [steps, default 25]
#                                [rounds, default 3]
#
# Needs the data root ../shared/data and /usr/bin/python3 (to read metrics.jsonl).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${1:-$here/../build/release}"
steps="${2:-25}"
rounds="${3:-3}"
source "$here/step_pairs.sh"
pairs_setup sum_check_step

modes=(off blake2b sha256 gmac)
for mode in "${modes[@]}"; do
  {
    cat "$here/../experiments/bert-tiny.cfg"
    case "$mode" in
      off) echo 'data_plane { check_sums: false }' ;;
      *) echo "data_plane { sum_digest: \"$mode\" }" ;;
    esac
  } >"$work/$mode.cfg"
done

# Median step cycle and median time outside compute (ms) of a run folder.
figures() {
  /usr/bin/python3 - "$1/metrics.jsonl" <<'PY'
import json, statistics, sys
steps = [r for r in map(json.loads, open(sys.argv[1])) if r.get("type") == "step"]
cycles, outside = [], []
for a, b in zip(steps, steps[1:]):
    cycle = b["wall_seconds"] - a["wall_seconds"]
    compute = max((w.get("compute_seconds", 0.0) for w in b.get("workers", [])), default=0.0)
    cycles.append(cycle)
    outside.append(cycle - compute)
print(f"{statistics.median(cycles[2:]) * 1e3:.1f} {statistics.median(outside[2:]) * 1e3:.1f}")
PY
}

echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1), $(nproc) cores shared by the coordinator and 2 workers"
echo "sha instructions: $(grep -qw sha_ni /proc/cpuinfo && echo yes || echo no); carry-less multiply: $(grep -qw pclmulqdq /proc/cpuinfo && echo yes || echo no); steps per run: $steps, rounds: $rounds"
declare -A cycle_of outside_of
for ((r = 1; r <= rounds; r++)); do
  k=$(((r - 1) % ${#modes[@]}))
  order=("${modes[@]:$k}" "${modes[@]:0:$k}")
  line="round $r:"
  for mode in "${order[@]}"; do
    out="$work/$r-$mode"
    "$build/bin/dctrain-launch" --workers 2 --config "$work/$mode.cfg" --data-dir "$data" \
      --steps "$steps" --out "$out" >"$out.log" 2>&1 || {
      tail -n 20 "$out.log"; echo "sum_check_step: the $mode run failed" >&2; exit 1
    }
    read -r cycle outside < <(figures "$out")
    cycle_of[$mode]+="$cycle "
    outside_of[$mode]+="$outside "
    line="$line $mode cycle $cycle ms, outside compute $outside ms;"
  done
  echo "$line"
done
median() { printf '%s\n' $1 | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
for mode in "${modes[@]}"; do
  c=$(median "${cycle_of[$mode]}")
  o=$(median "${outside_of[$mode]}")
  echo "RESULT $mode: step cycle $c ms, outside compute $o ms ($(awk -v o="$o" -v c="$c" 'BEGIN { printf "%.1f", 100 * o / c }')% of the cycle; median of $rounds rounds)"
done
