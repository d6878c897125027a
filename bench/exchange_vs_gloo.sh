#!/usr/bin/env bash
# Allreduce of float32 buffers among W processes on this host: the data
# plane's direct exchange (exchange/peer.h) against torch.distributed's gloo
# allreduce, same world size and bytes, 1 MiB and 17.5 MiB, worlds 2 and 4;
# beside them the star (everyone sends to rank 0, which sums in rank order
# and sends back) and a pipelined ring (ring-order sums: for comparison only).
# Each figure is the median over `rounds` runs, the runs of the four taken in
# turn so that a busy machine weighs on all of them alike; a run's figure is
# the median over its iterations of the slowest rank's time. Then, at 17.5
# MiB and world 4, what the exchange's choices are worth: zero-copy against
# copied sends, the allocator tuning, ZeroMQ I/O threads, piece sizes, and
# Unix sockets (ipc://) in place of TCP for members that share a host.
#
#   bash bench/exchange_vs_gloo.sh [build dir, default build/release] [rounds, default 3] [iterations, default 30]
#
# Needs /usr/bin/python3 with torch (Debian's python3-torch); the build and
# the tests do not.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${1:-$here/../build/release}"
rounds="${2:-3}"
iters="${3:-30}"
ours="$build/bench/bench_exchange_allreduce"
if [[ ! -x "$ours" ]]; then
  echo "exchange_vs_gloo: $ours not found; build first: cmake --build $build --target bench_exchange_allreduce" >&2
  exit 1
fi
if ! /usr/bin/python3 -c "import torch.distributed" 2>/dev/null; then
  echo "exchange_vs_gloo: /usr/bin/python3 cannot import torch; install python3-torch" >&2
  exit 1
fi

ms() { sed -n 's/^RESULT .* median_ms=\([0-9.]*\) .*$/\1/p' <<<"$1"; }
median() { tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'; }
run_ours() { "$ours" --iters "$iters" --warmup 5 "$@"; }
run_gloo() { /usr/bin/python3 "$here/gloo_allreduce.py" --iters "$iters" --warmup 5 "$@" 2>/dev/null; }

echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"
echo "cores: $(nproc), shared by every process of a run (W ranks and their ZeroMQ or gloo threads)" \
  "and by whatever else runs here; load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "torch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)') (gloo);" \
  "ours: pieces of 1 MiB, zero-copy, 2 ZeroMQ I/O threads, allocator tuned; $rounds rounds of $iters iterations"
echo
printf '%-6s %9s %12s %12s %8s %12s %8s %12s %8s\n' world MiB "exchange ms" "gloo ms" "ex/gloo" \
  "star ms" star/gloo "ring ms" ring/gloo
for bytes in 1048576 18350080; do
  for world in 2 4; do
    d="" g="" s="" r=""
    for ((i = 0; i < rounds; i++)); do
      d+=" $(ms "$(run_ours --algorithm direct --world "$world" --bytes "$bytes")")"
      g+=" $(ms "$(run_gloo --world "$world" --bytes "$bytes")")"
      s+=" $(ms "$(run_ours --algorithm star --world "$world" --bytes "$bytes")")"
      r+=" $(ms "$(run_ours --algorithm ring --world "$world" --bytes "$bytes")")"
    done
    d="$(median <<<"$d")" g="$(median <<<"$g")" s="$(median <<<"$s")" r="$(median <<<"$r")"
    printf '%-6s %9s %12s %12s %8s %12s %8s %12s %8s\n' "$world" \
      "$(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }')" "$d" "$g" "$(ratio "$d" "$g")" \
      "$s" "$(ratio "$s" "$g")" "$r" "$(ratio "$r" "$g")"
  done
done

echo
echo "the exchange's choices, 17.5 MiB, world 4 (ratio: against the default, same rounds)"
variants=("" "--copy" "--untuned" "--io-threads 1" "--piece-kib 256" "--piece-kib 4096" "--bind ipc://*")
names=("default" "copied sends" "allocator untuned" "1 I/O thread" "pieces of 256 KiB" "pieces of 4 MiB"
  "ipc:// (Unix sockets)")
declare -a figures
for ((i = 0; i < rounds; i++)); do
  for v in "${!variants[@]}"; do
    # shellcheck disable=SC2086  # the variant's flags split on purpose
    figures[v]+=" $(ms "$(run_ours --algorithm direct --world 4 --bytes 18350080 ${variants[v]})")"
  done
done
base="$(median <<<"${figures[0]}")"
printf '%-20s %10s %8s\n' variant "ms" ratio
for v in "${!variants[@]}"; do
  m="$(median <<<"${figures[v]}")"
  printf '%-20s %10s %8s\n' "${names[v]}" "$m" "$(ratio "$m" "$base")"
done
