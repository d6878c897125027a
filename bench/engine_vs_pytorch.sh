#!/usr/bin/env bash
# ResNet-20 training step, dctrain engine vs PyTorch, same model, batch and
# thread count, measured one after the other in this run. Prints images/s,
# the ratio ours / PyTorch, and each process's peak resident memory.
#
#   bash bench/engine_vs_pytorch.sh [build dir, default build/release] [steps, default 4]
#
# Needs /usr/bin/python3 with torch (Debian's python3-torch); the build and
# the tests do not.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${1:-$here/../build/release}"
steps="${2:-4}"
engine="$build/bench/bench_engine_resnet20"
if [[ ! -x "$engine" ]]; then
  echo "engine_vs_pytorch: $engine not found; build first: cmake --build $build --target bench_engine_resnet20" >&2
  exit 1
fi
if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  echo "engine_vs_pytorch: /usr/bin/python3 cannot import torch; install python3-torch" >&2
  exit 1
fi

rate() { sed -n 's/^RESULT threads=[0-9]* img_per_s=\([0-9.]*\)$/\1/p' <<<"$1"; }
maxrss() { sed -n 's/^peak resident memory: \([0-9.]*\) MiB$/\1/p' <<<"$1"; }

# Which CPU and OpenBLAS core the figures come from (the engine settles its
# core at start, see docs/deployment.md, "BLAS core"; PyTorch uses its own libraries).
echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"
printf '%-8s %12s %12s %8s %14s %14s\n' threads "dctrain" "pytorch" ratio "dctrain MiB" "pytorch MiB"
for threads in 1 2; do
  ours="$("$engine" --threads "$threads" --steps "$steps")"
  [[ "$threads" != 1 ]] || grep '^BLAS' <<<"$ours" | sed 's/^/dctrain engine /' || true
  theirs="$(/usr/bin/python3 "$here/pytorch_resnet20.py" --threads "$threads" --steps "$steps")"
  echo "$ours" | sed 's/^/  | /' >&2
  a="$(rate "$ours")"; b="$(rate "$theirs")"
  printf '%-8s %12s %12s %8s %14s %14s\n' "$threads" "$a img/s" "$b img/s" \
    "$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2f", a / b }')" "$(maxrss "$ours")" "$(maxrss "$theirs")"
done
