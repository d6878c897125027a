#!/usr/bin/env bash
# Installs what dctrain needs from Debian's packages (only what is missing),
# then configures and builds it. Idempotent: on a ready machine it only runs
# an incremental build.
#
#   tools/setup.sh                 install + Release build in build/release
#   tools/setup.sh --preset NAME   another CMake preset (e.g. debug-asan)
#   tools/setup.sh --deps-only     install packages, build nothing
#   tools/setup.sh --programs      build only the dctrain-* programs (no tests, benchmarks)
#   tools/setup.sh --browser       also install Chromium, for the report's browser test
#   tools/setup.sh --fuzz          also install clang-14 and libFuzzer, for tools/fuzz.sh
#   tools/setup.sh --torch         also install PyTorch, for the tests that load an exported model in it
#   tools/setup.sh --bench         also install PyTorch, the benchmarks' reference (bench/)
#   tools/setup.sh --log FILE      apt-get and build output to FILE, one line per phase here
set -euo pipefail

preset=release
build=1
target=all
browser=0
fuzz=0
bench=0
torch=0
log=""
while [ $# -gt 0 ]; do
  case "$1" in
    --preset) preset="$2"; shift 2 ;;
    --deps-only) build=0; shift ;;
    --programs) target=programs; shift ;;
    --browser) browser=1; shift ;;
    --fuzz) fuzz=1; shift ;;
    --torch) torch=1; shift ;;
    --bench) bench=1; shift ;;
    --log) log="$2"; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# Runs a phase's command; with --log its output goes to the log and the
# phase takes one line here (its last lines and the log's path on failure).
# A phase's function chains its commands with && (errexit does not apply
# inside the `if`).
phase() {
  local title="$1"; shift
  if [ -z "$log" ]; then "$@"; return; fi
  local start=$SECONDS
  printf 'setup: %s ... ' "$title"
  if "$@" >>"$log" 2>&1; then
    echo "done in $((SECONDS - start)) s (log: $log)"
  else
    local code=$?
    echo "FAILED (exit $code); the end of $log:"
    tail -n 20 "$log" | sed 's/^/  /'
    exit "$code"
  fi
}

# Build tools and the libraries named in cmake/Dependencies.cmake, plus
# gnuplot for reports and iproute2 for the multi-host test.
packages=(
  build-essential cmake ninja-build pkg-config
  libzmq3-dev cppzmq-dev libopenblas-dev libprotobuf-dev protobuf-compiler
  libspdlog-dev libfmt-dev libcli11-dev zlib1g-dev libmicrohttpd-dev libsodium-dev libssl-dev
  libgtest-dev libgmock-dev
  gnuplot-nox iproute2
)
# Headless Chromium opens the report in report_in_browser_test (label
# browser), which is skipped where it is absent.
[ "$browser" -eq 0 ] || packages+=(chromium)
# The fuzz preset's compiler and libFuzzer's runtime (tools/fuzz.sh).
[ "$fuzz" -eq 0 ] || packages+=(clang-14 libclang-rt-14-dev)
# PyTorch (gloo, the reference models) for the benchmarks that compare
# against it, and for the tests that load an exported model in it and
# compare its logits (skipped, and said so, where it is absent); the build
# does not need it.
[ "$bench" -eq 0 ] && [ "$torch" -eq 0 ] || packages+=(python3-torch)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [ "$status" = "install ok installed" ] || missing+=("$p")
done

if [ -n "$log" ]; then
  mkdir -p "$(dirname "$log")"
  : >"$log"
fi

install_missing() {
  local sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq &&
    "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

if [ ${#missing[@]} -gt 0 ]; then
  [ -n "$log" ] || echo "setup: installing ${missing[*]}"
  phase "installing ${#missing[@]} Debian packages (${missing[*]:0:3}...)" install_missing
else
  echo "setup: all ${#packages[@]} packages present"
fi

[ "$build" -eq 1 ] || exit 0

cd "$root"
build_tree() {
  cmake --preset "$preset" >/dev/null &&
    cmake --build --preset "$preset" --target "$target" -- -j"$(nproc)"
}
what="build/$preset"
[ "$target" = all ] || what="the programs of build/$preset"
phase "building $what with $(nproc) jobs" build_tree
echo "setup: built $what (programs in build/$preset/bin)"
