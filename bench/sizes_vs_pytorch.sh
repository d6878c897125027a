#!/usr/bin/env bash
# The larger sizes of the two families against PyTorch, in one run, same
# model, batch and threads, one after the other on this machine:
#   - resnet56 (experiments/resnet56.cfg) training steps at batch 16 (the
#     ready config's micro-batch) and 128, one thread;
#   - bert-mini (experiments/bert-mini.cfg: 4 layers, hidden 256, 4 heads,
#     1024) MLM steps of 32 x 128 tokens, one and two threads;
# then the peak resident memory of a real worker training each ready config
# (one worker, a few steps, /usr/bin/time), beside the PyTorch process's.
#
#   bash bench/sizes_vs_pytorch.sh [build dir, default build/release] [steps, default 3]
#
# Needs ../shared/data (CIFAR-10, the text corpus and its vocab) for the
# worker runs, and /usr/bin/python3 with torch (tools/setup.sh --bench).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$here/.."
build="${1:-$root/build/release}"
steps="${2:-3}"
data="$root/../shared/data"
for program in bench/bench_engine_resnet20 bench/bench_engine_bert_tiny bin/dctrain-coordinator bin/dctrain-worker; do
  if [[ ! -x "$build/$program" ]]; then
    echo "sizes_vs_pytorch: $build/$program not found; build first (cmake --build --preset release)" >&2
    exit 1
  fi
done
if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  echo "sizes_vs_pytorch: /usr/bin/python3 cannot import torch; run tools/setup.sh --bench" >&2
  exit 1
fi
[[ -x /usr/bin/time ]] || { echo "sizes_vs_pytorch: needs /usr/bin/time (apt-get install time)" >&2; exit 1; }
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT

echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1), $(nproc) cores (shared: figures are noisy)"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
field() { sed -n "$1" <<<"$2" | head -n 1; }

echo
echo "== resnet56, one thread: images/s"
printf '%-6s %12s %12s %8s %12s %12s\n' batch dctrain pytorch ratio "dctrain MiB" "pytorch MiB"
for batch in 16 128; do
  ours="$("$build/bench/bench_engine_resnet20" --depth 56 --threads 1 --batch "$batch" --steps "$steps")"
  theirs="$(/usr/bin/python3 "$here/pytorch_resnet20.py" --depth 56 --threads 1 --batch "$batch" --steps "$steps")"
  a="$(field 's/^RESULT threads=1 img_per_s=\([0-9.]*\)$/\1/p' "$ours")"
  b="$(field 's/^RESULT threads=1 img_per_s=\([0-9.]*\)$/\1/p' "$theirs")"
  printf '%-6s %12s %12s %8s %12s %12s\n' "$batch" "$a" "$b" "$(ratio "$a" "$b")" \
    "$(field 's/^peak resident memory: \([0-9.]*\) MiB$/\1/p' "$ours")" \
    "$(field 's/^peak resident memory: \([0-9.]*\) MiB$/\1/p' "$theirs")"
done

echo
echo "== bert-mini (L4 H256 A4 I1024), 32 x 128 tokens: tokens/s, best of $steps steps"
ours="$("$build/bench/bench_engine_bert_tiny" "$steps" 4 256 4 1024)"
theirs="$(OPENBLAS_NUM_THREADS=1 /usr/bin/python3 "$here/pytorch_bert_tiny.py" "$steps" 4 256 4 1024)"
printf '%-8s %12s %12s %8s\n' threads dctrain pytorch ratio
for threads in 1 2; do
  a="$(field "s/^threads $threads: *\([0-9]*\) tok\/s.*/\1/p" "$ours")"
  b="$(field "s/^threads $threads: *\([0-9]*\) tok\/s.*/\1/p" "$theirs")"
  printf '%-8s %12s %12s %8s\n' "$threads" "$a" "$b" "$(ratio "$a" "$b")"
done
echo "peak resident memory: dctrain engine $(field 's/^peak resident memory: \([0-9.]*\) MiB$/\1/p' "$ours") MiB, pytorch $(field 's/^peak resident memory: \([0-9.]*\) MiB$/\1/p' "$theirs") MiB"

# A worker of the ready config: its whole process (model, optimizer state,
# gradient buffers, data, the exchange), one thread, $steps steps.
worker_peak() {
  local config="$1" name="$2" dir="$scratch/$2"
  "$build/bin/dctrain-coordinator" --config "$config" --workers 1 --steps "$steps" \
    --data-dir "$data" --bind 'tcp://127.0.0.1:*' --out "$dir" --log-level warn &
  local coordinator=$!
  for _ in $(seq 600); do [[ -s "$dir/endpoint" ]] && break; sleep 0.1; done
  [[ -s "$dir/endpoint" ]] || { echo "sizes_vs_pytorch: the $name coordinator did not start" >&2; exit 1; }
  /usr/bin/time -f '%M' -o "$scratch/$name.rss" "$build/bin/dctrain-worker" \
    --connect "$(cat "$dir/endpoint")" --data-dir "$data" --log-level warn
  wait "$coordinator"
  awk '{ printf "%.1f", $1 / 1024 }' "$scratch/$name.rss"
}
echo
echo "== peak resident memory of one worker, ready config, one thread, $steps steps"
echo "resnet56 (experiments/resnet56.cfg, micro-batch 16): $(worker_peak "$root/experiments/resnet56.cfg" resnet56) MiB"
echo "bert-mini (experiments/bert-mini.cfg, micro-batch 4): $(worker_peak "$root/experiments/bert-mini.cfg" bert-mini) MiB"
