#!/usr/bin/env bash
# What one message of an exchange round costs its sender on this machine,
# for the simulator's exchange model (sim/network.h: a round takes hops x
# latency + messages x message_seconds + bytes / bandwidth). Two processes
# (one core each) run direct rounds of the same buffer cut into pieces of
# different sizes: the hops and the bytes stay, the messages change, so the
# slope of the round time against the messages a member sends is what one
# message costs (ZeroMQ's framing, the system calls, the wake-ups), and the
# intercept is the hops' latency and the bytes' copies over loopback.
# Prints each run and the least-squares line.
#
#   bash bench/exchange_message_cost.sh [build dir, default build/release] [rounds, default 3]
#       [bytes, default 262144] [piece sizes in KiB, default "256 64 16 4 1"]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${1:-$here/../build/release}"
rounds="${2:-3}"
bytes="${3:-262144}"
pieces="${4:-256 64 16 4 1}"
ours="$build/bench/bench_exchange_allreduce"
[[ -x "$ours" ]] || { echo "exchange_message_cost: $ours not found; build first" >&2; exit 1; }
echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1), $(nproc) cores; 2 processes, $bytes bytes, direct"
ms() { sed -n 's/^RESULT .* median_ms=\([0-9.]*\) .*$/\1/p' <<<"$1"; }
median() { tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
points=""
for ((i = 0; i < rounds; i++)); do
  for kib in $pieces; do
    points+="$kib $(ms "$("$ours" --algorithm direct --world 2 --bytes "$bytes" --piece-kib "$kib" --iters 200 --warmup 20)")"$'\n'
  done
done
/usr/bin/python3 - "$bytes" <<PY
import statistics, sys
total = int(sys.argv[1])
by_piece = {}
for line in """$points""".strip().splitlines():
    kib, ms = line.split()
    by_piece.setdefault(int(kib), []).append(float(ms) / 1e3)
rows = []
for kib, times in sorted(by_piece.items(), reverse=True):
    shard = total / 2
    per_phase = max(1, -(-int(shard) // (kib * 1024)))
    rows.append((kib, 2 * per_phase, statistics.median(times)))  # a member sends its shard's pieces twice
n = len(rows)
mx = sum(m for _, m, _ in rows) / n
my = sum(t for *_, t in rows) / n
slope = sum((m - mx) * (t - my) for _, m, t in rows) / sum((m - mx) ** 2 for _, m, _ in rows)
intercept = my - slope * mx
print(f"{'piece KiB':>9}{'messages':>10}{'round ms':>10}{'line ms':>9}")
for kib, m, t in rows:
    print(f"{kib:>9}{m:>10}{t * 1e3:>10.3f}{(intercept + slope * m) * 1e3:>9.3f}")
print(f"a message: {slope * 1e6:.1f} us of its sender's time; hops and bytes: {intercept * 1e3:.3f} ms")
PY
