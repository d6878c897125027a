#!/usr/bin/env bash
# Goodput under failures: the effective training time ratio (ETTR, as
# Meta's study of large-scale training reliability defines it: productive
# time over wall time) of an exchange run with 4 workers started by hand,
# one of them SIGKILLed (and restarted at once) every 100 steps, or
# SIGSTOPped for 3 s (or as given) every 100 steps, beside the same run without failures,
# all on this host, the runs taken in turn.
#
#   ETTR = steps x (the undisturbed run's median step) / wall time
#
# where the wall time is the run's training time (its last step's
# wall_seconds: plans of the first step to the last step's end). The ratio
# of a disturbed run's ETTR to the undisturbed run's is what a failure
# costs beyond the work it redoes; the target is >= 0.97.
#
#   bash bench/goodput_under_failures.sh [build dir, default build/release] [steps, default 300]
#                                        [rounds, default 1] [config, default experiments/resnet20.cfg]
#                                        [stop seconds, default 3]
#
# A failure that is found within a second or two costs little of 100 steps
# only when a step is long enough: ETTR >= 0.97 with a 1.5 s cost needs 100
# steps of 0.5 s or more, which resnet20 at batch 128 takes on 2 cores
# (mnist-cnn's 50-100 ms steps cannot hide a stop found after 3 heartbeats).
#
# Needs the data root ../shared/data (cifar-10-*/, mnist/) and /usr/bin/python3.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${1:-$here/../build/release}"
steps="${2:-300}"
rounds="${3:-1}"
config="${4:-$here/../experiments/resnet20.cfg}"
stop_seconds="${5:-3}"
data="$here/../../shared/data"
bin="$build/bin"
[[ -x "$bin/dctrain-coordinator" ]] || { echo "goodput: $bin/dctrain-coordinator not found; build first (bash tools/setup.sh)" >&2; exit 1; }
[[ -d "$data" ]] || { echo "goodput: no data root at $data" >&2; exit 1; }
((steps >= 100)) || { echo "goodput: give at least 100 steps (one failure per 100)" >&2; exit 2; }
work="$(mktemp -d /tmp/dctrain-goodput.XXXXXX)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

# The config with its own stop (the steps), no checkpoints, the evaluation
# every 100 steps (off the step loop, as by default).
grep -v -E '^[[:space:]]*(stop|checkpoint|eval)[[:space:]]*\{' "$config" >"$work/run.cfg"
printf 'stop { max_steps: %d }\neval { every_steps: 100 batch: 500 }\n' "$steps" >>"$work/run.cfg"

steps_done() {
  local n
  n=$(grep -c '"type":"step"' "$1/metrics.jsonl" 2>/dev/null) || true
  echo "${n:-0}"
}

# One run: `failure` is none, kill or stop. Prints nothing; leaves $out.
run() {
  local failure="$1" out="$2"
  mkdir -p "$out"
  "$bin/dctrain-coordinator" --config "$work/run.cfg" --bind "tcp://127.0.0.1:*" --out "$out" \
    --data-dir "$data" >"$out.coordinator.log" 2>&1 &
  local coordinator=$!
  pids+=("$coordinator")
  local waited=0
  until [[ -s "$out/endpoint" ]]; do
    sleep 0.1; waited=$((waited + 1))
    ((waited < 600)) || { echo "goodput: the coordinator did not start" >&2; tail "$out.coordinator.log" >&2; exit 1; }
  done
  local endpoint; endpoint="$(cat "$out/endpoint")"
  declare -A worker
  for w in 0 1 2 3; do
    "$bin/dctrain-worker" --connect "$endpoint" --name "w$w" --data-dir "$data" \
      >"$out.w$w.0.log" 2>&1 &
    worker[$w]=$!
    disown "${worker[$w]}"  # its end by SIGKILL is the point, not news
    pids+=("${worker[$w]}")
  done
  local next=50 victim=3 incarnation=1
  while kill -0 "$coordinator" 2>/dev/null; do
    sleep 0.02
    [[ "$failure" == none ]] && continue
    local done; done=$(steps_done "$out")
    ((done >= next && next < steps)) || continue
    next=$((next + 100))
    if [[ "$failure" == kill ]]; then
      kill -9 "${worker[$victim]}" 2>/dev/null || true
      "$bin/dctrain-worker" --connect "$endpoint" --name "w$victim" --data-dir "$data" \
        >"$out.w$victim.$incarnation.log" 2>&1 &
      worker[$victim]=$!
      disown "${worker[$victim]}"
      pids+=("${worker[$victim]}")
      incarnation=$((incarnation + 1))
    else
      kill -STOP "${worker[$victim]}"
      sleep "$stop_seconds"
      kill -CONT "${worker[$victim]}"
    fi
    victim=$(((victim + 3) % 4))  # 3, 2, 1, 0, ...
  done
  wait "$coordinator" || { echo "goodput: the $failure run failed:" >&2; tail -n 20 "$out.coordinator.log" >&2; exit 1; }
  # The workers end on the coordinator's bye (disowned: polled, not waited).
  for w in 0 1 2 3; do
    while kill -0 "${worker[$w]}" 2>/dev/null; do sleep 0.05; done
  done
}

# steps, median step (s), wall (s), longest step (s) and its step, samples,
# lost samples, failed audits, checksum mismatches of a run folder.
figures() {
  /usr/bin/python3 - "$1" <<'PY'
import json, statistics, sys
folder = sys.argv[1]
steps = [r for r in map(json.loads, open(folder + "/metrics.jsonl")) if r.get("type") == "step"]
summary = json.load(open(folder + "/summary.json"))
seconds = [r["step_seconds"] for r in steps]
longest = max(range(len(steps)), key=lambda i: seconds[i])
print(len(steps), statistics.median(seconds), steps[-1]["wall_seconds"], seconds[longest],
      steps[longest]["step"], summary["samples"], summary["samples_lost"],
      summary["audits_failed"], summary["checksum_mismatches"])
PY
}

echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1); $(nproc) cores shared by the coordinator and 4 workers"
echo "config: $config, $steps steps a run, $rounds round(s); data plane and liveness: the config's (defaults: timeout 10 s, heartbeat 0.5 s)"
printf '%-6s %-6s %6s %10s %9s %12s %8s %8s %12s\n' round run steps "median ms" "wall s" "longest s" ETTR "vs none" "lost/audit/x"
ratios_kill=() ratios_stop=()
for ((r = 1; r <= rounds; r++)); do
  for failure in none kill stop; do
    out="$work/$r-$failure"
    run "$failure" "$out"
    read -r n median wall longest longest_step samples lost audits mismatches < <(figures "$out")
    [[ "$failure" == none ]] && base_median="$median"
    ettr=$(awk -v n="$n" -v m="$base_median" -v w="$wall" 'BEGIN { printf "%.4f", n * m / w }')
    [[ "$failure" == none ]] && base_ettr="$ettr"
    ratio=$(awk -v a="$ettr" -v b="$base_ettr" 'BEGIN { printf "%.3f", a / b }')
    [[ "$failure" == kill ]] && ratios_kill+=("$ratio")
    [[ "$failure" == stop ]] && ratios_stop+=("$ratio")
    printf '%-6s %-6s %6d %10.1f %9.2f %7.3f (%3d) %8s %8s %4d/%d/%d\n' "$r" "$failure" "$n" \
      "$(awk -v m="$median" 'BEGIN { print m * 1000 }')" "$wall" "$longest" "$longest_step" "$ettr" \
      "${ratio}x" "$lost" "$audits" "$mismatches"
  done
done
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo "RESULT ETTR with one SIGKILL per 100 steps / without failures: $(median "${ratios_kill[@]}")x; with one ${stop_seconds} s SIGSTOP per 100 steps: $(median "${ratios_stop[@]}")x (target >= 0.97)"
