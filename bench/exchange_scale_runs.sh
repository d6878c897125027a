#!/usr/bin/env bash
# Real runs of the exchange at 8 to 64 workers on this host, each schedule
# (exchange/round_schedule.h) side by side: the MLP on generated images,
# one micro-batch of 8 per worker a step, tau = inf, 100 steps, through
# dctrain-launch (every worker a process on this host's cores, loopback).
# For each run: the exit status, the checks the coordinator made (replicas'
# checksums, the epochs' audit: every sample once per epoch, none lost), the
# most TCP connections any worker process held (ss, sampled every second),
# the median over steps of the workers' median time from plan to
# contribution less compute (the exchange round, mostly) and the mean step.
#
#   bash bench/exchange_scale_runs.sh [build dir, default build/release] [workers, default "8 16 32 64"]
#       [steps, default 100] [schedules, default "direct halving"]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${1:-$here/../build/release}"
counts="${2:-8 16 32 64}"
steps="${3:-100}"
schedules="${4:-direct halving}"
launch="$build/bin/dctrain-launch"
[[ -x "$launch" ]] || { echo "exchange_scale_runs: $launch not found; build first" >&2; exit 1; }
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1), $(nproc) cores shared by every worker and the coordinator"
printf '%-8s %-8s %5s %10s %8s %7s %9s %13s %11s\n' workers schedule exit checksums "audits/failed" lost \
  "max TCP" "round ms" "step ms"

for n in $counts; do
  for schedule in $schedules; do
    from=1
    [[ $schedule == direct ]] && from=100000
    cfg="$scratch/x$n-$schedule.cfg"
    cat >"$cfg" <<CFG
name: "exchange-scale"
seed: 1
workers: $n
model { name: "mlp" }
dataset { kind: "synthetic" synthetic_samples: $((8 * n * 25)) }
optimizer { kind: "sgd" lr: 0.05 momentum: 0.9 }
step { global_batch: $((8 * n)) micro_batch: 8 tau: inf }
data_plane { kind: "exchange" halving_from_members: $from }
eval { every_steps: 1000 batch: 500 }
stop { max_steps: $steps }
progress_seconds: 30
CFG
    out="$scratch/run-$n-$schedule"
    "$launch" --workers "$n" --config "$cfg" --out "$out" --log-level warn >"$scratch/log-$n-$schedule" 2>&1 &
    pid=$!
    most=0
    while kill -0 "$pid" 2>/dev/null; do
      # TCP connections per worker process (its control connection, its
      # outboxes and the connections its inbox accepted).
      workers=$(pgrep -f "dctrain-worker --connect" | tr '\n' ' ' || true)
      if [[ -n "$workers" ]]; then
        top=$({ ss -tnpH state established 2>/dev/null || true; } |
          { grep -o 'pid=[0-9]*' || true; } | sort | uniq -c |
          awk -v w=" $workers" '{ split($2, p, "="); if (index(w, " " p[2] " ")) print $1 }' |
          sort -rn | head -n 1)
        [[ -n "$top" && "$top" -gt "$most" ]] && most=$top
      fi
      sleep 0.3
    done
    status=0
    wait "$pid" || status=$?
    figures=$(/usr/bin/python3 - "$out" <<'PY'
import json, statistics, sys
out = sys.argv[1]
s = json.load(open(f"{out}/summary.json"))
steps, rounds = [], []
for line in open(f"{out}/metrics.jsonl"):
    r = json.loads(line)
    if r.get("type") != "step":
        continue
    steps.append(r["step_seconds"])
    o = [w.get("overhead_seconds", 0.0) for w in r.get("workers", []) if w.get("contributed")]
    if o:
        rounds.append(statistics.median(o))
print(s.get("checksum_mismatches", 0),
      f'{s.get("epochs_audited", 0)}/{s.get("audits_failed", 0)}', s.get("samples_lost", 0),
      f"{1e3 * statistics.median(rounds[5:] or rounds):.1f}", f"{1e3 * statistics.mean(steps[5:] or steps):.1f}")
PY
) || figures="? ? ? ? ?"
    read -r mism audited lost round step <<<"$figures"
    printf '%-8s %-8s %5s %10s %8s %7s %9s %13s %11s\n' "$n" "$schedule" "$status" "$mism mism." \
      "$audited" "$lost" "$most" "$round" "$step"
  done
done
