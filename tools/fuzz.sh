#!/usr/bin/env bash
# Builds the libFuzzer targets (preset `fuzz`: clang-14, coverage,
# AddressSanitizer + UndefinedBehaviorSanitizer), writes their seed corpora
# from a real run (dctrain-fuzz-seeds), then runs each target for a while.
# Fails (exit 1) if any target crashes, leaks, times out or runs out of
# memory; the input that did it is kept under build/fuzz/artifacts/.
#
#   tools/fuzz.sh [--seconds N] [--jobs J] [--only NAME[,NAME...]] [--no-build]
#     --seconds N   fuzzing time per target (default 60)
#     --jobs J      processes per target (libFuzzer -fork=J; default 1)
#     --only LIST   these targets only: envelope, text_format, checkpoint,
#                   metrics_json, sweep, coordinator, session, safetensors
#     --no-build    use the targets already in build/fuzz
#
# The corpus each target grows is kept in build/fuzz/corpus/NAME, so a
# second run starts where the first left off. Reproduce a crash with
#   build/fuzz/fuzz/fuzz_NAME build/fuzz/artifacts/NAME-crash-...
set -euo pipefail

seconds=60
jobs=1
only=""
build=1
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    --only) only="$2"; shift 2 ;;
    --no-build) build=0; shift ;;
    -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "fuzz.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done
case "$seconds$jobs" in
  *[!0-9]*) echo "fuzz.sh: --seconds and --jobs take whole numbers" >&2; exit 2 ;;
esac

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
targets=(envelope text_format checkpoint metrics_json sweep coordinator session safetensors)
if [ -n "$only" ]; then
  IFS=, read -r -a targets <<<"$only"
fi

out=build/fuzz
if [ "$build" -eq 1 ]; then
  start=$SECONDS
  bash tools/setup.sh --fuzz --preset fuzz
  echo "fuzz: built $out in $((SECONDS - start)) s"
fi
for t in "${targets[@]}"; do
  if [ ! -x "$out/fuzz/fuzz_$t" ]; then
    echo "fuzz: no target '$t' in $out/fuzz (targets: envelope, text_format, checkpoint," \
         "metrics_json, sweep, coordinator, session, safetensors; build with tools/fuzz.sh without --no-build)" >&2
    exit 2
  fi
done

# The targets and the seed recorder make run folders under the temporary
# directory, which a fuzzer's exit does not remove: they get one of their
# own, removed when this script ends.
scratch=$(mktemp -d "${TMPDIR:-/tmp}/dctrain-fuzz.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
export TMPDIR="$scratch"

rm -rf "$out/seeds"
"$out/fuzz/dctrain-fuzz-seeds" "$out/seeds"
mkdir -p "$out/artifacts" "$out/logs"

failed=()
summary=()
for t in "${targets[@]}"; do
  mkdir -p "$out/corpus/$t" "$out/seeds/$t"
  log="$out/logs/$t.log"
  args=(-max_total_time="$seconds" -timeout=30 -rss_limit_mb=2048 -print_final_stats=1
        -artifact_prefix="$out/artifacts/$t-")
  [ "$jobs" -le 1 ] || args+=(-fork="$jobs")
  echo "fuzz: $t for $seconds s ($jobs job(s)); log $log"
  # The corpus folder first: libFuzzer adds what it finds there.
  if "$out/fuzz/fuzz_$t" "${args[@]}" "$out/corpus/$t" "$out/seeds/$t" >"$log" 2>&1; then
    status=ok
  else
    status="FAILED (exit $?)"
    failed+=("$t")
    grep -E "ERROR: |SUMMARY: |Test unit written to|^(a |the |reprinted|case |check_tensors|encode)" \
      "$log" | head -n 12 | sed 's/^/  /' || true
  fi
  # The last status line: "#RUNS ... cov: C ft: F corp: N/SIZE ... exec/s: E".
  line=$(grep -E "cov: [0-9]+ ft: [0-9]+" "$log" | tail -n 1 || true)
  runs=$(grep -Eo "stat::number_of_executed_units: *[0-9]+" "$log" | grep -Eo "[0-9]+$" | tail -n 1 || true)
  [ -n "$runs" ] || runs=$(sed -E 's/^#([0-9]+).*/\1/;t;d' <<<"$line")
  cov=$(grep -Eo "cov: [0-9]+" <<<"$line" | grep -Eo "[0-9]+" || echo "?")
  ft=$(grep -Eo "ft: [0-9]+" <<<"$line" | grep -Eo "[0-9]+" || echo "?")
  corp=$(grep -Eo "corp: [0-9]+" <<<"$line" | grep -Eo "[0-9]+" || echo "?")
  rate=$(grep -Eo "exec/s: [0-9]+" <<<"$line" | grep -Eo "[0-9]+" || echo "?")
  summary+=("$(printf '%-13s %-18s %12s %9s %6s %7s %8s' "$t" "$status" "${runs:-?}" "$rate" "$cov" "$ft" "$corp")")
done

echo
printf '%-13s %-18s %12s %9s %6s %7s %8s\n' target status executions exec/s cov ft corpus
printf '%s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: ${failed[*]} failed; inputs under $out/artifacts/, logs under $out/logs/" >&2
  exit 1
fi
echo "fuzz: every target ran ${seconds} s without a failure"
