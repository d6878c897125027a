#!/usr/bin/env bash
# The engine at DropCompute's micro-batches, against itself at the whole
# batch and against PyTorch at both, in one run; then the whole system.
#   1. bench_engine_micro_batch: ResNet-20 and bert-tiny, the same 128
#      samples as one call and as 8 calls of 16 (median of rounds, the two
#      back to back): the engine's own ratio, micro / whole.
#   2. PyTorch on the same models at batch 16 and 128, forward + backward
#      (no optimizer step, as the engine's calls), one thread, best of its
#      steps: ours / PyTorch at each batch.
#   3. The whole system: dctrain-launch, one worker, one thread,
#      experiments/resnet20.cfg (global batch 128 in micro-batches of 16,
#      CIFAR-10 from the data root), images/s over its steps (128 / the
#      mean step; the first steps' warm-up and the optimizer included)
#      against PyTorch at batch 128.
#
#   bash bench/micro_batch_vs_pytorch.sh [build dir, default build/release] [rounds, default 5]
#        [system steps, default 24]
# Needs /usr/bin/python3 with torch and the data root ../shared/data
# (cifar-10-batches-bin) for part 3.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${1:-$here/../build/release}"
rounds="${2:-5}"
system_steps="${3:-24}"
data="${DCTRAIN_DATA:-$here/../../shared/data}"
engine="$build/bench/bench_engine_micro_batch"
for program in "$engine" "$build/bin/dctrain-launch"; do
  [[ -x "$program" ]] || { echo "micro_batch_vs_pytorch: $program not found; build first" >&2; exit 1; }
done
/usr/bin/python3 -c "import torch" 2>/dev/null ||
  { echo "micro_batch_vs_pytorch: /usr/bin/python3 cannot import torch; install python3-torch" >&2; exit 1; }
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1), one thread everywhere"

ours="$("$engine" --rounds "$rounds")"
echo "$ours" | grep -v '^RESULT'
row() {  # MODEL COLUMN: whole/s (2) or micro/s (3) of the engine's table
  awk -v m="$1" -v c="$2" '$1 == m { print $c }' <<<"$ours"
}
torch_resnet() {  # BATCH -> images/s
  /usr/bin/python3 "$here/pytorch_resnet20.py" --threads 1 --batch "$1" --steps "$2" |
    sed -n 's/^RESULT threads=1 img_per_s=\([0-9.]*\)$/\1/p'
}
torch_bert() {  # BATCH -> sequences/s
  OPENBLAS_NUM_THREADS=1 /usr/bin/python3 "$here/pytorch_bert_tiny.py" --batch "$1" \
    --no-optimizer --threads 1 "$2" | awk '$1 == "threads" { printf "%.2f", $3 / 128 }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

echo
printf '%-10s %6s %16s %16s %8s\n' model batch "dctrain /s" "pytorch /s" ratio
resnet_128=""
for model in resnet20 bert-tiny; do
  for batch in 16 128; do
    if [[ "$model" == resnet20 ]]; then
      theirs="$(torch_resnet "$batch" $((batch == 16 ? 24 : 4)))"
      [[ "$batch" == 128 ]] && resnet_128="$theirs"
    else
      theirs="$(torch_bert "$batch" $((batch == 16 ? 6 : 2)))"
    fi
    mine="$(row "$model" $((batch == 16 ? 3 : 2)))"
    printf '%-10s %6s %16s %16s %8s\n' "$model" "$batch" "$mine" "$theirs" "$(ratio "$mine" "$theirs")"
  done
done

echo
"$build/bin/dctrain-launch" --workers 1 --config "$here/../experiments/resnet20.cfg" --data-dir "$data" \
  --steps "$system_steps" --out "$scratch/system" >"$scratch/system.log" 2>&1 ||
  { tail -n 20 "$scratch/system.log"; echo "micro_batch_vs_pytorch: the system run failed" >&2; exit 1; }
step="$(/usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["mean_step_seconds"])' \
  "$scratch/system/summary.json")"
system="$(awk -v s="$step" 'BEGIN { printf "%.1f", 128 / s }')"
echo "system: dctrain-launch, 1 worker, experiments/resnet20.cfg, $system_steps steps: $system img/s;" \
  "PyTorch at batch 128: $resnet_128 img/s; ratio $(ratio "$system" "$resnet_128")"
