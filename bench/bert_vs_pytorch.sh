#!/bin/sh
# bert-tiny training throughput, dctrain against PyTorch, in one run:
#   bench/bert_vs_pytorch.sh [build dir] [timed steps] [rounds]
# Needs a release build (cmake --preset release && cmake --build build/release)
# and python3-torch. The two programs alternate for `rounds` rounds (the
# machine is shared: alternating spreads the load of others over both); each
# side's best figure per thread count goes into the ratio ours / PyTorch.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build/release}
steps=${2:-5}
rounds=${3:-2}
ours=$build/bench/bench_engine_bert_tiny
if [ ! -x "$ours" ]; then
  echo "bert_vs_pytorch: $ours not found; build it with cmake --build $build --target bench_engine_bert_tiny" >&2
  exit 1
fi
# Which CPU and OpenBLAS core the figures come from (the engine prints its
# core, settled at start: see docs/deployment.md, "BLAS core").
echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"
ours_all=""
torch_all=""
round=1
while [ "$round" -le "$rounds" ]; do
  out=$("$ours" "$steps")
  echo "$out"
  ours_all="$ours_all
$out"
  out=$(OPENBLAS_NUM_THREADS=1 /usr/bin/python3 "$here/pytorch_bert_tiny.py" "$steps")
  echo "$out"
  torch_all="$torch_all
$out"
  round=$((round + 1))
done
best() {  # best tok/s for a thread count among "threads N: X tok/s" lines
  echo "$1" | awk -v t="$2" '$1 == "threads" && $2 == t":" && $3 > m {m = $3} END {print m}'
}
for threads in 1 2; do
  a=$(best "$ours_all" "$threads")
  b=$(best "$torch_all" "$threads")
  awk -v t="$threads" -v a="$a" -v b="$b" \
    'BEGIN { printf "ratio dctrain / PyTorch, %d thread(s): %.2fx (best %d vs %d tok/s)\n", t, a / b, a, b }'
done
