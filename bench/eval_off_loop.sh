#!/usr/bin/env bash
# Steps per second of mnist-cnn (experiments/mnist-cnn.cfg, 4 local workers)
# with an evaluation of the 10,000 MNIST test images every 50 steps: in the
# step loop (eval.in_step_loop: true, the workers wait for it) against off
# the step loop (the default: a snapshot evaluated in the coordinator's own
# thread while the steps go on). Both run here, in turn, `rounds` times each;
# the figure of a run is steps / training wall time (summary.json), each
# side's figure the median over its runs, and the ratio is off / in.
#
#   bash bench/eval_off_loop.sh [data root, default ../shared/data] [build dir, default build/release] [steps, default 300] [rounds, default 1]
#
# Every process runs on this host and shares its cores: on a 2-core machine
# the evaluation thread competes with the workers, so the gain is smaller
# than where the coordinator has a core of its own.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
data="${1:-$here/../../shared/data}"
build="${2:-$here/../build/release}"
steps="${3:-300}"
rounds="${4:-1}"
launch="$build/bin/dctrain-launch"
if [[ ! -x "$launch" ]]; then
  echo "eval_off_loop: $launch not found; build first: bash tools/setup.sh" >&2
  exit 1
fi
if [[ ! -d "$data/mnist" ]]; then
  echo "eval_off_loop: no mnist/ under the data root '$data'; pass a data root laid out like ../shared/data" >&2
  exit 1
fi
base="$here/../experiments/mnist-cnn.cfg"
work="$(mktemp -d "${TMPDIR:-/tmp}/dctrain-eval-bench.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# The ready config with an evaluation every 50 steps, and no checkpoints (a
# checkpoint's cost is the same either way and only adds noise).
for mode in in off; do
  flag=false
  [[ "$mode" == in ]] && flag=true
  sed -e "s/^eval {.*}/eval { every_steps: 50 batch: 500 in_step_loop: $flag }/" \
      -e "s/^checkpoint {.*}/checkpoint { every_steps: 0 }/" "$base" >"$work/$mode.cfg"
  grep -q "in_step_loop: $flag" "$work/$mode.cfg" || {
    echo "eval_off_loop: could not set eval in $base (its eval line changed?)" >&2
    exit 1
  }
done

# steps/s, evaluations and their mean seconds of one run, from its folder.
figures() {
  /usr/bin/python3 - "$1" <<'PY'
import json, sys
folder = sys.argv[1]
summary = json.load(open(folder + "/summary.json"))
evals = [json.loads(l) for l in open(folder + "/metrics.jsonl") if '"type":"eval"' in l.replace(" ", "")]
steps = [json.loads(l) for l in open(folder + "/metrics.jsonl") if '"type":"step"' in l.replace(" ", "")]
in_loop = sum(s["eval_seconds"] for s in steps)
mean_eval = sum(e["seconds"] for e in evals) / max(len(evals), 1)
print(f'{summary["steps"] / summary["wall_seconds"]:.4f} {len(evals)} {mean_eval:.3f} {in_loop:.3f} {summary["wall_seconds"]:.2f}')
PY
}
median() { tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1), $(nproc) cores"
echo "mnist-cnn, 4 workers, $steps steps, an evaluation (10,000 images) every 50 steps; $rounds round(s)"
declare -A rates=([in]="" [off]="")
for ((r = 1; r <= rounds; r++)); do
  for mode in in off; do
    out="$work/$mode-$r"
    "$launch" --workers 4 --config "$work/$mode.cfg" --out "$out" --data-dir "$data" \
      --steps "$steps" >"$work/$mode-$r.log" 2>&1 || {
      echo "eval_off_loop: the run '$mode' failed; the end of its log:" >&2
      tail -n 20 "$work/$mode-$r.log" >&2
      exit 1
    }
    read -r rate evals mean_eval in_loop wall < <(figures "$out")
    label=$([[ "$mode" == in ]] && echo "in the step loop " || echo "off the step loop")
    printf '%s  round %d: %7.2f steps/s  (%d evaluations of %.2f s each; step loop spent %.2f s on them; %.1f s in all)\n' \
      "$label" "$r" "$rate" "$evals" "$mean_eval" "$in_loop" "$wall"
    rates[$mode]+="$rate "
  done
done
in_rate=$(median <<<"${rates[in]}")
off_rate=$(median <<<"${rates[off]}")
awk -v a="$off_rate" -v b="$in_rate" \
  'BEGIN { printf "steps/s: in the step loop %.2f, off the step loop %.2f: ratio %.2fx\n", b, a, a / b }'
