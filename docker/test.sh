#!/usr/bin/env bash
# The container image and the Compose file, built and run for real on this
# host: mnist-cnn with a coordinator and 4 worker containers, beside the same
# run with dctrain-launch outside Docker (same losses, bit for bit, when the
# image has this host's OpenBLAS and libm); again with one worker container
# killed in the middle of the run (the run finishes, nothing lost); and once
# stopped with SIGTERM (every program ends cleanly, summary written).
#
#   bash docker/test.sh [--data DIR] [--steps N] [--workers N] [--max-image-mb MB]
#                       [--build-dir DIR] [--keep DIR]
#
#   --data DIR         data root laid out like ../shared/data (default: the
#                      repository's ../shared/data), mounted read-only
#   --steps N          steps of each run (default 300: about a minute on 2
#                      cores; the accuracies are compared at that step)
#   --workers N        worker containers (default 4)
#   --max-image-mb MB  fail when the image is larger (default 200)
#   --build-dir DIR    native build with dctrain-launch (default build/release;
#                      built with tools/setup.sh when missing)
#   --keep DIR         copy the run folders and logs there before cleaning up
#
# Needs root (it may install Debian packages and start dockerd). On a fresh
# Debian 12 it installs what is missing (docker.io, docker-compose,
# debootstrap), starts a dockerd of its own when none answers (stopped again
# on every exit path), and, since no image registry may be reachable, makes
# the base images debian:12 and debian:12-slim with debootstrap from this
# machine's Debian mirror (read from its apt sources). Images and the build
# cache are kept in the daemon for the next run; containers, networks and
# volumes of the test are removed.
#
# Exit status: 0 passed, 1 failed, 77 cannot run here (not root, no data).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
data="$root/../shared/data"
steps=300
workers=4
max_image_mb=200
build_dir="$root/build/release"
keep=""
while [ $# -gt 0 ]; do
  case "$1" in
    --data) data="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --workers) workers="$2"; shift 2 ;;
    --max-image-mb) max_image_mb="$2"; shift 2 ;;
    --build-dir) build_dir="$2"; shift 2 ;;
    --keep) keep="$2"; shift 2 ;;
    -h|--help) sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "docker/test.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done

t0=$(date +%s)
say() { printf '[docker/test +%4ds] %s\n' "$(($(date +%s) - t0))" "$*"; }
fail() { say "FAIL: $*"; exit 1; }
skip() { say "SKIP: $*"; exit 77; }

[ "$(id -u)" -eq 0 ] || skip "needs root (it installs packages and starts dockerd): run it with sudo"
[ -d "$data/mnist" ] || skip "no MNIST under $data/mnist: pass --data with a data root laid out like ../shared/data"
data="$(cd "$data" && pwd)"

image=dctrain:test
project="dctrain-test-$$"
work="$(mktemp -d /tmp/dctrain-docker-test.XXXXXX)"
dockerd_pid=""
compose=()

cleanup() {
  local status=$?
  set +e
  if [ ${#compose[@]} -gt 0 ] && docker info >/dev/null 2>&1; then
    "${compose[@]}" -p "$project" -f "$root/docker/compose.yaml" down -v --remove-orphans >/dev/null 2>&1
  fi
  if [ -n "$dockerd_pid" ]; then
    say "stopping the dockerd this test started (pid $dockerd_pid)"
    kill -TERM "$dockerd_pid" 2>/dev/null
    for _ in $(seq 60); do kill -0 "$dockerd_pid" 2>/dev/null || break; sleep 0.5; done
    if kill -0 "$dockerd_pid" 2>/dev/null; then
      say "dockerd did not stop within 30 s: killing it"
      kill -KILL "$dockerd_pid" 2>/dev/null
    fi
    wait "$dockerd_pid" 2>/dev/null
  fi
  if [ -n "$keep" ]; then
    mkdir -p "$keep" && cp -a "$work"/. "$keep"/ && rm -rf "$keep/rootfs"
    say "run folders and logs kept in $keep"
  fi
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- 1. packages ------------------------------------------------------------
missing=()
need_package() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed' || missing+=("$1"); }
docker info >/dev/null 2>&1 || command -v dockerd >/dev/null || need_package docker.io
command -v docker >/dev/null || need_package docker.io
docker compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null || need_package docker-compose
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- 2. the daemon ------------------------------------------------------------
if docker info >/dev/null 2>&1; then
  say "using the Docker daemon that answers ($(docker version -f '{{.Server.Version}}'))"
else
  say "no Docker daemon answers: starting dockerd (log $work/dockerd.log)"
  dockerd >"$work/dockerd.log" 2>&1 &
  dockerd_pid=$!
  for _ in $(seq 120); do
    docker info >/dev/null 2>&1 && break
    kill -0 "$dockerd_pid" 2>/dev/null || { tail -n 20 "$work/dockerd.log"; fail "dockerd exited at start (log above)"; }
    sleep 0.5
  done
  docker info >/dev/null 2>&1 || { tail -n 20 "$work/dockerd.log"; fail "dockerd did not answer within 60 s"; }
  say "dockerd $(docker version -f '{{.Server.Version}}') answers (pid $dockerd_pid)"
fi
if docker compose version >/dev/null 2>&1; then compose=(docker compose); else compose=(docker-compose); fi

# --- 3. base images -----------------------------------------------------------
# The Debian mirror and security mirror this machine's apt uses: one-line
# sources (sources.list, *.list) and deb822 ones (*.sources).
apt_uri_for_suite() {
  local suite="$1" f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    sed -e 's/\[[^]]*\]//' "$f" | awk -v s="$suite" '$1 == "deb" && $3 == s {print $2; exit}'
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk -v s="$suite" '
      /^[ \t]*$/ { if (deb && hit && uri != "") { print uri; exit } deb = 0; hit = 0; uri = ""; next }
      tolower($1) == "types:" { for (i = 2; i <= NF; i++) if ($i == "deb") deb = 1 }
      tolower($1) == "uris:" { uri = $2 }
      tolower($1) == "suites:" { for (i = 2; i <= NF; i++) if ($i == s) hit = 1 }
      END { if (deb && hit && uri != "") print uri }' "$f"
  done
}
if docker image inspect debian:12 >/dev/null 2>&1 && docker image inspect debian:12-slim >/dev/null 2>&1; then
  say "base images debian:12 and debian:12-slim present"
else
  mirror="$(apt_uri_for_suite bookworm | head -n 1)"
  security="$(apt_uri_for_suite bookworm-security | head -n 1)"
  [ -n "$mirror" ] || fail "no apt source for bookworm in /etc/apt/sources.list{,.d/*}: cannot make the base image"
  command -v debootstrap >/dev/null || {
    say "installing debootstrap"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
  }
  say "making debian:12 with debootstrap from $mirror (about a minute or more)"
  rootfs="$work/rootfs"
  debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 ||
    { tail -n 20 "$work/debootstrap.log"; fail "debootstrap failed (log above)"; }
  # The sources of Debian's own image, on this machine's mirrors.
  rm -f "$rootfs/etc/apt/sources.list"
  {
    printf 'Types: deb\nURIs: %s\nSuites: bookworm bookworm-updates\nComponents: main\n' "$mirror"
    printf 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n'
    if [ -n "$security" ]; then
      printf '\nTypes: deb\nURIs: %s\nSuites: bookworm-security\nComponents: main\n' "$security"
      printf 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n'
    fi
  } >"$rootfs/etc/apt/sources.list.d/debian.sources"
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  tar -C "$rootfs" -c . | docker import - debian:12 >/dev/null
  # -slim as Debian makes it: no documentation, manuals or translations (the
  # copyright files stay), and dpkg told not to install them again.
  find "$rootfs/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
  find "$rootfs/usr/share/doc" -mindepth 1 -type d -empty -delete
  rm -rf "$rootfs"/usr/share/{man,info,locale}/*
  cat >"$rootfs/etc/dpkg/dpkg.cfg.d/docker-slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
EOF
  tar -C "$rootfs" -c . | docker import - debian:12-slim >/dev/null
  rm -rf "$rootfs"
  say "base images made: debian:12 $(docker image inspect -f '{{.Size}}' debian:12 | awk '{printf "%.0f MB", $1 / 1e6}'), debian:12-slim $(docker image inspect -f '{{.Size}}' debian:12-slim | awk '{printf "%.0f MB", $1 / 1e6}')"
fi

# --- 4. the plain run, outside Docker -----------------------------------------
if [ ! -x "$build_dir/bin/dctrain-launch" ]; then
  say "no $build_dir/bin/dctrain-launch: building with tools/setup.sh"
  bash "$root/tools/setup.sh" >"$work/setup.log" 2>&1 || { tail -n 30 "$work/setup.log"; fail "tools/setup.sh failed"; }
fi
say "plain run: dctrain-launch, $workers workers, mnist-cnn, $steps steps"
begin=$(date +%s)
"$build_dir/bin/dctrain-launch" --workers "$workers" --config "$root/experiments/mnist-cnn.cfg" \
  --out "$work/plain" --data-dir "$data" --steps "$steps" >"$work/plain.log" 2>&1 ||
  { tail -n 30 "$work/plain.log"; fail "the plain run failed (log above)"; }

# A top-level field of summary.json (Protobuf's JSON printer writes one per
# line, indented by one space; nested objects are indented further).
field() { sed -n "s/^ \"$2\": \"\{0,1\}\([^\",]*\)\"\{0,1\},\{0,1\}\$/\1/p" "$1" | head -n 1; }
plain_accuracy=$(field "$work/plain/summary.json" final_eval_accuracy)
plain_loss=$(field "$work/plain/summary.json" final_eval_loss)
say "plain run done in $(($(date +%s) - begin)) s: accuracy $plain_accuracy, eval loss $plain_loss"

# --- 5. the image -------------------------------------------------------------
# The Compose file uses CURVE with its keys as secrets: make a set, owned
# by the containers' user (a secret key must be readable by its owner only).
"$build_dir/bin/dctrain-keygen" --dir "$work/keys" coordinator worker >/dev/null ||
  fail "dctrain-keygen failed"
chown 10001:10001 "$work/keys/coordinator.key" "$work/keys/worker.key"
export DCTRAIN_KEYS="$work/keys"
say "compose: ${compose[*]} ($("${compose[@]}" version --short 2>/dev/null || "${compose[@]}" version | head -n 1))"
# Both Compose generations must read the file; check each one present.
if docker compose version >/dev/null 2>&1; then
  docker compose -p "$project" -f "$root/docker/compose.yaml" config -q || fail "docker compose (v2) refuses docker/compose.yaml"
  say "docker compose (v2) reads docker/compose.yaml"
fi
if command -v docker-compose >/dev/null; then
  docker-compose -p "$project" -f "$root/docker/compose.yaml" config -q || fail "docker-compose (v1) refuses docker/compose.yaml"
  say "docker-compose (v1) reads docker/compose.yaml"
fi

say "docker build -f docker/Dockerfile -t $image . (a first build installs the toolchain and compiles everything: minutes; later ones reuse the cache)"
begin=$(date +%s)
docker build -f "$root/docker/Dockerfile" -t "$image" "$root" >"$work/build.log" 2>&1 ||
  { tail -n 40 "$work/build.log"; fail "docker build failed (log above)"; }
size_mb=$(docker image inspect -f '{{.Size}}' "$image" | awk '{printf "%.0f", $1 / 1e6}')
base_mb=$(docker image inspect -f '{{.Size}}' debian:12-slim | awk '{printf "%.0f", $1 / 1e6}')
say "image built in $(($(date +%s) - begin)) s: $image is $size_mb MB (base debian:12-slim $base_mb MB)"
[ "$size_mb" -le "$max_image_mb" ] || fail "the image is $size_mb MB, above the bound of $max_image_mb MB"

in_image() { docker run --rm --entrypoint /bin/sh "$image" -c "$1"; }
uid=$(in_image 'id -u')
[ "$uid" = 10001 ] || fail "the image runs as uid $uid, not 10001"
unresolved=$(in_image 'ldd /usr/local/bin/dctrain-* | grep "not found" || true')
[ -z "$unresolved" ] || fail "shared libraries missing in the image: $unresolved"
say "image runs as uid $uid; every program's libraries resolve: $(docker run --rm "$image" dctrain-coordinator --version)"

# The math libraries the workers load, here and in the image: when they are
# the same files, the containers must compute exactly what the plain run did
# (OPENBLAS_CORETYPE, when set here, is passed into them by the Compose file).
math_libs() {
  cat <<'EOF'
for lib in $(ldd "$1" | awk '/libopenblas|libm\.so/ {print $3}'); do md5sum <"$(readlink -f "$lib")"; done
EOF
}
host_libs=$(math_libs | sh -s "$build_dir/bin/dctrain-worker" | tr '\n' ' ')
image_libs=$(math_libs | docker run --rm -i --entrypoint /bin/sh "$image" -s /usr/local/bin/dctrain-worker | tr '\n' ' ')
if [ "$host_libs" = "$image_libs" ]; then
  same_math=1
  say "the image's OpenBLAS and libm are this host's: the Compose run must repeat the plain run bit for bit"
else
  same_math=0
  say "the image's OpenBLAS or libm differ from this host's ($image_libs / $host_libs): accuracies compared within a tolerance"
fi

# --- 6. Compose runs ----------------------------------------------------------
runs="$work/runs"
mkdir -p "$runs"
chown 10001:10001 "$runs"
export DCTRAIN_IMAGE="$image" DCTRAIN_CONFIG=mnist-cnn.cfg DCTRAIN_WORKERS="$workers" DCTRAIN_STEPS="$steps"
export DCTRAIN_DATA="$data" DCTRAIN_RUNS="$runs"
dc() { "${compose[@]}" -p "$project" -f "$root/docker/compose.yaml" "$@"; }
# Containers of a service, by the labels both Compose generations set.
service_ids() {
  docker ps -a -q --filter "label=com.docker.compose.project=$project" \
    --filter "label=com.docker.compose.service=$1"
}
steps_done() {
  local n
  n=$(grep -c '"type":"step"' "$1" 2>/dev/null) || true
  echo "${n:-0}"
}

# Starts a run named $1, waits for its coordinator to exit, printing progress.
# With "kill K": kills one worker container once K steps are done; with
# "stop K": stops the whole project then (SIGTERM, as `docker compose stop`).
compose_run() {
  local run="$1" action="${2:-}" at="${3:-}" begin coordinator ndone last=0 stop_begin
  export DCTRAIN_RUN="$run"
  begin=$(date +%s)
  dc up -d --no-build --scale worker="$workers" >"$work/$run-up.log" 2>&1 ||
    { cat "$work/$run-up.log"; fail "compose up failed for run $run (output above)"; }
  coordinator=$(service_ids coordinator)
  [ -n "$coordinator" ] || fail "no coordinator container for run $run"
  say "run $run: coordinator and $(service_ids worker | wc -l) workers up in $(($(date +%s) - begin)) s"
  killed=""
  stopped=""
  while [ "$(docker inspect -f '{{.State.Running}}' "$coordinator")" = true ]; do
    sleep 2
    ndone=$(steps_done "$runs/$run/metrics.jsonl")
    if [ "$action" = kill ] && [ -z "$killed" ] && [ "$ndone" -ge "$at" ]; then
      killed=$(service_ids worker | sed -n 2p)
      killed_host=$(docker inspect -f '{{.Config.Hostname}}' "$killed")
      docker kill "$killed" >/dev/null
      say "run $run: step $ndone: docker kill ${killed:0:12} (worker container $(docker inspect -f '{{.Name}}' "$killed" | tr -d /), host name $killed_host)"
    fi
    if [ "$action" = stop ] && [ -z "$stopped" ] && [ "$ndone" -ge "$at" ]; then
      say "run $run: step $ndone: ${compose[*]} stop (SIGTERM to every container, SIGKILL after 10 s)"
      stop_begin=$(date +%s)
      dc stop >"$work/$run-stop.log" 2>&1 || { cat "$work/$run-stop.log"; fail "compose stop failed"; }
      stopped=$(($(date +%s) - stop_begin))
      say "run $run: every container stopped in $stopped s"
    fi
    if [ $(($(date +%s) - last)) -ge 15 ]; then
      say "run $run: step $ndone of $steps"
      last=$(date +%s)
    fi
    [ $(($(date +%s) - begin)) -lt 900 ] || { dc logs --tail 30; fail "run $run still going after 15 minutes"; }
  done
  # Workers leave on the coordinator's bye.
  for id in $(service_ids worker); do timeout 60 docker wait "$id" >/dev/null || fail "worker ${id:0:12} still running 60 s after the coordinator"; done
  dc logs --no-color >"$work/$run-compose.log" 2>&1
  say "run $run: finished in $(($(date +%s) - begin)) s"
}

# Exit status of every container of run $1: $2 (default 0); the killed one
# must be 137.
check_exits() {
  local run="$1" expected="${2:-0}" id code name
  for id in $(service_ids coordinator) $(service_ids worker); do
    code=$(docker inspect -f '{{.State.ExitCode}}' "$id")
    name=$(docker inspect -f '{{.Name}}' "$id" | tr -d /)
    if [ "$id" = "${killed:-}" ]; then
      [ "$code" = 137 ] || fail "run $run: the killed container $name exited with $code, not 137"
    elif [ "$code" != "$expected" ]; then
      tail -n 30 "$work/$run-compose.log"
      fail "run $run: $name exited with status $code, not $expected (log above)"
    fi
  done
  say "run $run: every service exited $expected$([ -n "${killed:-}" ] && echo " (the killed worker: 137)")"
}

# summary.json of run $1: all steps, nothing lost, accuracy within $2 of the plain run.
check_summary() {
  local run="$1" tolerance="$2" summary="$runs/$1/summary.json" accuracy lost ndone
  [ -f "$summary" ] || fail "run $run wrote no summary.json"
  accuracy=$(field "$summary" final_eval_accuracy)
  lost=$(field "$summary" samples_lost)
  ndone=$(field "$summary" steps)
  say "run $run: accuracy $accuracy (plain $plain_accuracy), eval loss $(field "$summary" final_eval_loss) (plain $plain_loss), steps $ndone, samples lost $lost, checksum mismatches $(field "$summary" checksum_mismatches)"
  [ "$ndone" = "$steps" ] || fail "run $run did $ndone steps, not $steps"
  [ "$lost" = 0 ] || fail "run $run lost $lost samples"
  [ "$(field "$summary" checksum_mismatches)" = 0 ] || fail "run $run: replicas diverged"
  awk -v a="$accuracy" -v p="$plain_accuracy" -v t="$tolerance" 'BEGIN { d = a - p; if (d < 0) d = -d; exit !(d <= t) }' ||
    fail "run $run: accuracy $accuracy is not within $tolerance of the plain run's $plain_accuracy"
}

dc down -v --remove-orphans >/dev/null 2>&1 || true
say "compose run 'full': $workers worker containers, data root $data read-only"
compose_run full
check_exits full
grep -q "security: CURVE on every connection" "$work/full-compose.log" ||
  fail "run full: the coordinator did not use CURVE (see $work/full-compose.log)"
# Same config, seed and worker count, tau = infinity: the same computation as
# the plain run; the tolerance covers a different OpenBLAS build in the image.
check_summary full 0.01
losses() { grep '"type":"step"' "$1" | grep -o '"loss":[^,]*'; }
if cmp -s <(losses "$work/plain/metrics.jsonl") <(losses "$runs/full/metrics.jsonl") &&
   [ "$(field "$runs/full/summary.json" final_eval_loss)" = "$plain_loss" ]; then
  say "run full: all $steps step losses and the final eval loss equal the plain run's, bit for bit"
elif [ "$same_math" = 1 ]; then
  fail "run full: the losses differ from the plain run's with the same libraries (is $build_dir built from this tree? is OPENBLAS_CORETYPE the same?)"
else
  say "run full: the losses differ from the plain run's in the last digits (other math libraries)"
fi
dc down -v --remove-orphans >/dev/null 2>&1

kill_step=$((steps / 3))
say "compose run 'kill': one worker container killed once step $kill_step is done"
compose_run kill kill "$kill_step"
[ -n "$killed" ] || fail "run kill ended before step $kill_step: no worker was killed"
check_exits kill
# The surviving workers take the dead one's micro-batches: the same samples
# per step, in another grouping, so the accuracy stays close.
check_summary kill 0.02
# Dead at once when the coordinator sees its connection close; after
# liveness.silence_seconds when nothing closes it (a vanished host).
dead_line="worker '$killed_host:[0-9]*' (rank [0-9]*)\(: its connection closed; declared dead now\| silent for .*presumed dead\)"
grep -q "$dead_line" "$runs/kill/coordinator.log" ||
  fail "the coordinator log does not name the killed worker $killed_host as dead"
say "run kill: $(grep -o "$dead_line" "$runs/kill/coordinator.log" | head -n 1)"
dc down -v --remove-orphans >/dev/null 2>&1

# SIGTERM reaches each program (PID 1 of its container) and ends it
# cleanly: workers say bye, the coordinator writes summary.json; status 130
# everywhere, none killed at the end of the grace period (137).
stop_step=$((steps / 6))
say "compose run 'stop': the whole project stopped once step $stop_step is done"
compose_run stop stop "$stop_step"
[ -n "$stopped" ] || fail "run stop ended before step $stop_step: nothing was stopped"
check_exits stop 130
summary="$runs/stop/summary.json"
[ -f "$summary" ] || fail "run stop: the coordinator wrote no summary.json after SIGTERM"
[ "$(field "$summary" stop_reason)" = "interrupted by a signal" ] ||
  fail "run stop: stop reason '$(field "$summary" stop_reason)', not 'interrupted by a signal'"
[ "$(field "$summary" samples_lost)" = 0 ] || fail "run stop lost $(field "$summary" samples_lost) samples"
say "run stop: summary.json written after $(field "$summary" steps) steps, stop reason '$(field "$summary" stop_reason)', samples lost 0"
dc down -v --remove-orphans >/dev/null 2>&1

say "PASS in $(($(date +%s) - t0)) s (image $size_mb MB)"
