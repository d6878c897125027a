#!/usr/bin/env bash
# A model's time outside compute per step, the data plane "star" (every
# gradient through the coordinator) against "exchange" (the workers sum
# among themselves, the coordinator commits), 2 and 4 workers, real
# processes (dctrain-launch) on this host; beside them the reference the
# exchange is held to: gloo's allreduce of the same gradient bytes at the
# same world size (torch.distributed, bench/gloo_allreduce.py) plus one
# optimizer step of the model (bench_optimizer_step), measured in the same
# run.
#
# Time outside compute of a step = the coordinator's wall clock from one
# step's close to the next (plans, exchange or reduce, commit or update,
# the workers' apply) minus the slowest worker's compute in it; the median
# over the measured steps (the first `warmup` are skipped). Runs of the two
# planes alternate, `rounds` each, and the figures are medians over rounds,
# so a change in the machine's load weighs on both alike.
#
#   bash bench/dataplane_vs_star.sh [build dir, default build/release] [steps, default 20] [rounds, default 2] [data root, default ../shared/data] [model, default bert-tiny] [worker counts, default "2 4"]
#
# Worker counts are a space- or comma-separated list ("2,4,8,15" on a
# 16-core host: one worker per core, the coordinator on the last). Each
# worker computes on one thread (dctrain-launch's default).
#
# Models: bert-tiny with BERT's vocabulary (4.4M parameters, 17.5 MB of
# gradient; AdamW; 4 sequences of 128 tokens per worker per step) on
# tinyshakespeare; resnet20 (0.27M parameters, 1.1 MB; SGD with momentum;
# 32 images per worker per step) on CIFAR-10; both from the data root.
#
# The gloo reference needs a python3 with torch: /usr/bin/python3 with
# Debian's python3-torch, else the first python3 on PATH that has it (or
# $PYTHON); the rest runs without it (the reference columns then say "-").
#
# A second table gives, per plane, the medians the first is made of: the
# step cycle and the slowest worker's compute in it.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${1:-$here/../build/release}"
steps="${2:-20}"
rounds="${3:-2}"
data="${4:-$here/../../shared/data}"
model="${5:-bert-tiny}"
IFS=', ' read -r -a worker_counts <<<"${6:-2 4}"
for workers in "${worker_counts[@]}"; do
  if [[ ! "$workers" =~ ^[1-9][0-9]*$ ]]; then
    echo "dataplane_vs_star: worker count '$workers' is not a positive whole number" >&2
    exit 2
  fi
done
case "$model" in
  bert-tiny)
    # 4,367,546 parameters, 17.5 MiB as gloo's buffer (as the issue's table).
    model_cfg='model { name: "bert-tiny" vocab_size: 30522 }
dataset { kind: "text-mlm" corpus: "tinyshakespeare" vocab: "bert-base-uncased/vocab.txt" test_limit: 32 }
optimizer { kind: "adamw" lr: 1e-3 weight_decay: 0.01 }'
    per_worker=4 micro=4 bytes=18350080 optimizer_row="bert-tiny adamw"
    what="bert-tiny, 4 sequences of 128 tokens per worker per step"
    if [[ ! -f "$data/bert-base-uncased/vocab.txt" || ! -d "$data/text/tinyshakespeare" ]]; then
      echo "dataplane_vs_star: no bert-base-uncased/vocab.txt or text/tinyshakespeare under" \
        "$data; pass the data root as the fourth argument" >&2
      exit 1
    fi
    ;;
  resnet20)
    # 269,722 parameters: 1,078,888 bytes of gradient.
    model_cfg='model { name: "resnet20" num_classes: 10 image_channels: 3 image_height: 32 image_width: 32 }
dataset { kind: "cifar10" augment: true test_limit: 250 }
optimizer { kind: "sgd" lr: 0.1 momentum: 0.9 weight_decay: 5e-4 }'
    per_worker=32 micro=16 bytes=1078888 optimizer_row="resnet20  sgd"
    what="resnet20, 32 images per worker per step"
    if [[ ! -d "$data/cifar-10-batches-bin" && ! -d "$data/cifar-10-partial" ]]; then
      echo "dataplane_vs_star: no cifar-10-batches-bin or cifar-10-partial under $data;" \
        "pass the data root as the fourth argument" >&2
      exit 1
    fi
    ;;
  *)
    echo "dataplane_vs_star: model '$model' is not known; use bert-tiny or resnet20" >&2
    exit 2
    ;;
esac
warmup=4
launch="$build/bin/dctrain-launch"
optimizer="$build/bench/bench_optimizer_step"
for program in "$launch" "$optimizer"; do
  if [[ ! -x "$program" ]]; then
    echo "dataplane_vs_star: $program not found; build first: cmake --build $build" >&2
    exit 1
  fi
done
# A python3 that can import torch.distributed, for the gloo reference; any
# python3 for reading the metrics.
python="" gloo=0
for candidate in ${PYTHON:-} /usr/bin/python3 "$(command -v python3 || true)"; do
  if [[ -x "$candidate" ]] && "$candidate" -c "import torch.distributed" 2>/dev/null; then
    python="$candidate" gloo=1
    break
  fi
done
[[ -n "$python" ]] || python="$(command -v python3 || echo /usr/bin/python3)"
dir="$(mktemp -d "${TMPDIR:-/tmp}/dctrain-dataplane-XXXXXX")"

median() { tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan"; else print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a ~ /^[0-9.]+$/ && b ~ /^[0-9.]+$/ && b > 0) printf "%.2fx", a / b; else printf "-" }'; }

# Three medians (ms) over a run's measured steps: time outside compute,
# the step cycle, the slowest worker's compute.
step_medians() {
  "$python" - "$1" "$warmup" <<'PY'
import json, statistics, sys
records = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
steps = [r for r in records if r.get("type", "step") == "step" and "workers" in r]
steps = steps[int(sys.argv[2]):]
outside, cycles, computes = [], [], []
for previous, step in zip(steps, steps[1:]):
    cycle = step["wall_seconds"] - previous["wall_seconds"] - step.get("eval_seconds", 0) \
        - step.get("checkpoint_seconds", 0)
    compute = max((w["compute_seconds"] for w in step["workers"]), default=0.0)
    outside.append(1e3 * (cycle - compute))
    cycles.append(1e3 * cycle)
    computes.append(1e3 * compute)
print(" ".join(f"{statistics.median(v):.2f}" if v else "nan" for v in (outside, cycles, computes)))
PY
}

run() {  # plane workers round
  local name="$model-$1-$2-$3"
  cat >"$dir/$name.cfg" <<CFG
name: "dataplane-$name"
seed: 1
workers: $2
$model_cfg
step { global_batch: $((per_worker * $2)) micro_batch: $micro tau: inf }
eval { every_steps: 1000000 batch: 32 }
stop { max_steps: $steps }
data_plane { kind: "$1" }
CFG
  if ! "$launch" --workers "$2" --config "$dir/$name.cfg" --out "$dir/$name" \
    --data-dir "$data" >"$dir/$name.log" 2>&1; then
    echo "dataplane_vs_star: run $name failed; see $dir/$name.log" >&2
    exit 1
  fi
  step_medians "$dir/$name/metrics.jsonl"
}

echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"
echo "cores: $(nproc), shared by the coordinator, every worker and whatever else runs here;" \
  "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$what, tau = inf, $steps steps per run (first $warmup not measured), $rounds rounds"
update="$("$optimizer" --repeats 10 | sed -n "s/^$optimizer_row .*params: step *\([0-9.]*\) ms.*\$/\1/p")"
echo "one optimizer step ($optimizer_row, bench_optimizer_step, 1 thread): $update ms"
if ((gloo)); then
  echo "gloo reference: torch $("$python" -c 'import torch; print(torch.__version__)') ($python)"
else
  echo "no torch.distributed here (install python3-torch): no gloo reference"
fi
echo
printf '%-8s %12s %14s %10s %16s %12s %12s\n' workers "star ms" "exchange ms" "ex/star" \
  "gloo+update ms" "ex/ref" "star/ref"
details=()
for workers in "${worker_counts[@]}"; do
  declare -A figures=()
  g=""
  for ((i = 0; i < rounds; i++)); do
    for plane in star exchange; do
      read -r outside cycle compute <<<"$(run "$plane" "$workers" "$i")"
      figures[$plane.outside]+=" $outside" figures[$plane.cycle]+=" $cycle"
      figures[$plane.compute]+=" $compute"
    done
    if ((gloo)); then
      g+=" $("$python" "$here/gloo_allreduce.py" --world "$workers" --bytes "$bytes" \
        --iters 20 --warmup 5 2>/dev/null | sed -n 's/^RESULT .* median_ms=\([0-9.]*\) .*$/\1/p')"
    fi
  done
  for key in "${!figures[@]}"; do figures[$key]="$(median <<<"${figures[$key]}")"; done
  s="${figures[star.outside]}" x="${figures[exchange.outside]}"
  ref="-" allreduce="-"
  if ((gloo)); then
    allreduce="$(median <<<"$g")"
    ref="$(awk -v g="$allreduce" -v a="$update" 'BEGIN { printf "%.2f", g + a }')"
  fi
  printf '%-8s %12s %14s %10s %16s %12s %12s\n' "$workers" "$s" "$x" "$(ratio "$x" "$s")" "$ref" \
    "$(ratio "$x" "$ref")" "$(ratio "$s" "$ref")"
  details+=("$(printf '%-8s %12s %14s %14s %16s %14s' "$workers" "${figures[star.cycle]}" \
    "${figures[star.compute]}" "${figures[exchange.cycle]}" "${figures[exchange.compute]}" "$allreduce")")
  unset figures
done
echo
echo "medians per step (ms): the step cycle and the slowest worker's compute in it; gloo's allreduce alone"
printf '%-8s %12s %14s %14s %16s %14s\n' workers "star step" "star compute" "exchange step" \
  "exchange compute" "gloo allreduce"
printf '%s\n' "${details[@]}"
echo "run folders: $dir"
