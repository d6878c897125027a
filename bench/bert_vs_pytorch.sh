#!/bin/sh
# bert-tiny training throughput, dctrain against PyTorch, in one run:
#   bench/bert_vs_pytorch.sh [build dir] [timed steps]
# Needs a release build (cmake --preset release && cmake --build build/release)
# and python3-torch. Prints both programs' output and the ratios ours/PyTorch.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build/release}
steps=${2:-5}
ours=$build/bench/bench_engine_bert_tiny
if [ ! -x "$ours" ]; then
  echo "bert_vs_pytorch: $ours not found; build it with cmake --build $build --target bench_engine_bert_tiny" >&2
  exit 1
fi
ours_out=$("$ours" "$steps")
echo "$ours_out"
torch_out=$(OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 /usr/bin/python3 "$here/pytorch_bert_tiny.py" "$steps")
echo "$torch_out"
for threads in 1 2; do
  a=$(echo "$ours_out" | awk -v t="$threads" '$1 == "threads" && $2 == t":" {print $3}')
  b=$(echo "$torch_out" | awk -v t="$threads" '$1 == "threads" && $2 == t":" {print $3}')
  awk -v t="$threads" -v a="$a" -v b="$b" \
    'BEGIN { printf "ratio dctrain / PyTorch, %d thread(s): %.2fx (%d vs %d tok/s)\n", t, a / b, a, b }'
done
