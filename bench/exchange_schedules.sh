#!/usr/bin/env bash
# The exchange's two schedules (exchange/round_schedule.h) against each other
# and against torch.distributed's gloo allreduce, at 2 to 64 processes on
# this host: direct (N - 1 peers per member, 2 hops) and recursive halving
# and doubling (log2(N) peers, 2 log2(N) hops). Each figure is the median
# over `rounds` runs of the median over iterations of the slowest rank's
# time; the runs of the three are taken in turn, so that a busy machine
# weighs on all of them alike. Every process of a run shares this host's
# cores, so the figures say what the schedules cost in messages, wake-ups
# and copies, not what they would take with a core and a link per member.
#
#   bash bench/exchange_schedules.sh [build dir, default build/release] [rounds, default 3]
#       [iterations, default 20] [bytes, default 1048576] [worlds, default "2 4 8 16 32 64"]
#       [gloo up to this world, default 32: each gloo rank is a Python process with torch]
#
# Needs /usr/bin/python3 with torch (Debian's python3-torch) for the gloo column.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${1:-$here/../build/release}"
rounds="${2:-3}"
iters="${3:-20}"
bytes="${4:-1048576}"
worlds="${5:-2 4 8 16 32 64}"
gloo_up_to="${6:-32}"
ours="$build/bench/bench_exchange_allreduce"
if [[ ! -x "$ours" ]]; then
  echo "exchange_schedules: $ours not found; build first: cmake --build $build --target bench_exchange_allreduce" >&2
  exit 1
fi
gloo=1
if ! /usr/bin/python3 -c "import torch.distributed" 2>/dev/null; then
  echo "exchange_schedules: /usr/bin/python3 cannot import torch (python3-torch): no gloo column" >&2
  gloo=0
fi

ms() { sed -n 's/^RESULT .* median_ms=\([0-9.]*\) .*$/\1/p' <<<"$1"; }
median() { tr ' ' '\n' | { grep . || true; } | sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-") print "-"; else printf "%.2fx", a / b }'; }
run_ours() { "$ours" --iters "$iters" --warmup 5 --bytes "$bytes" "$@"; }
run_gloo() { /usr/bin/python3 "$here/gloo_allreduce.py" --iters "$iters" --warmup 5 --bytes "$bytes" "$@" 2>/dev/null; }

echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"
echo "cores: $(nproc), shared by every process of a run; load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$(awk -v b="$bytes" 'BEGIN { printf "%.2f", b / 1048576 }') MiB per rank, pieces of 1 MiB, zero-copy;" \
  "$rounds rounds of $iters iterations; gloo up to world $gloo_up_to"
echo
printf '%-6s %12s %12s %10s %12s %10s %10s\n' world "direct ms" "halving ms" "hv/direct" "gloo ms" \
  "hv/gloo" "dir/gloo"
for world in $worlds; do
  d="" h="" g=""
  for ((i = 0; i < rounds; i++)); do
    # Rotated from round to round, so no schedule always runs first.
    case $((i % 3)) in
      0) order="direct halving gloo" ;;
      1) order="halving gloo direct" ;;
      *) order="gloo direct halving" ;;
    esac
    for which in $order; do
      case $which in
        direct) d+=" $(ms "$(run_ours --algorithm direct --world "$world")")" ;;
        halving) h+=" $(ms "$(run_ours --algorithm halving --world "$world")")" ;;
        gloo) if ((gloo && world <= gloo_up_to)); then g+=" $(ms "$(run_gloo --world "$world")")"; fi ;;
      esac
    done
  done
  d="$(median <<<"$d")" h="$(median <<<"$h")" g="$(median <<<"$g")"
  printf '%-6s %12s %12s %10s %12s %10s %10s\n' "$world" "$d" "$h" "$(ratio "$h" "$d")" "$g" \
    "$(ratio "$h" "$g")" "$(ratio "$d" "$g")"
done
