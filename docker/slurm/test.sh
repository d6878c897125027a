#!/usr/bin/env bash
# docker/slurm/dctrain.sbatch run for real on a one-node Slurm cluster that
# this script makes on this host, with the native programs of a build folder
# (no containers): mnist-cnn with 4 worker tasks, beside the same run with
# dctrain-launch (same losses, bit for bit: same binaries, same libraries).
#
#   bash docker/slurm/test.sh [--data DIR] [--steps N] [--workers N] [--build-dir DIR]
#                             [--keep DIR]
#
#   --data DIR       data root laid out like ../shared/data (default: the
#                    repository's ../shared/data)
#   --steps N        steps of each run (default 300)
#   --workers N      worker tasks (default 4)
#   --build-dir DIR  build with the programs (default build/release; built with
#                    tools/setup.sh when missing)
#   --keep DIR       copy the run folders, configuration and logs there
#
# Needs root. Installs slurm-wlm and munge when missing, writes slurm.conf
# and a munge key in a temporary folder (one node, `localhost`, 8 CPUs
# declared whatever the host has, so that 4 single-CPU tasks and the
# coordinator fit on 2 cores; process tracking by /proc, no cgroups), starts
# munged, slurmctld and slurmd there on free ports, submits the batch script
# with `sbatch --wait`, and stops the three daemons by PID on every exit path.
# Nothing outside the temporary folder is configured.
#
# Exit status: 0 passed, 1 failed, 77 cannot run here (not root, no data).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
data="$root/../shared/data"
steps=300
workers=4
build_dir="$root/build/release"
keep=""
while [ $# -gt 0 ]; do
  case "$1" in
    --data) data="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --workers) workers="$2"; shift 2 ;;
    --build-dir) build_dir="$2"; shift 2 ;;
    --keep) keep="$2"; shift 2 ;;
    -h|--help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "docker/slurm/test.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done

t0=$(date +%s)
say() { printf '[slurm/test +%4ds] %s\n' "$(($(date +%s) - t0))" "$*"; }
fail() { say "FAIL: $*"; exit 1; }
skip() { say "SKIP: $*"; exit 77; }

[ "$(id -u)" -eq 0 ] || skip "needs root (it installs packages and starts slurmd): run it with sudo"
[ -d "$data/mnist" ] || skip "no MNIST under $data/mnist: pass --data with a data root laid out like ../shared/data"
data="$(cd "$data" && pwd)"
build_dir="$(cd "$build_dir" 2>/dev/null && pwd || echo "$build_dir")"

work="$(mktemp -d /tmp/dctrain-slurm-test.XXXXXX)"
chmod 755 "$work"
pids=()        # daemons started here, stopped in reverse order
job=""

cleanup() {
  local status=$? i
  set +e
  [ -n "$job" ] && scancel "$job" 2>/dev/null
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    kill -TERM "${pids[i]}" 2>/dev/null
    for _ in $(seq 40); do kill -0 "${pids[i]}" 2>/dev/null || break; sleep 0.25; done
    kill -KILL "${pids[i]}" 2>/dev/null
    wait "${pids[i]}" 2>/dev/null
  done
  [ ${#pids[@]} -gt 0 ] && say "stopped munged, slurmctld and slurmd (pids ${pids[*]})"
  if [ -n "$keep" ]; then
    mkdir -p "$keep" && cp -a "$work"/. "$keep"/ 2>/dev/null
    say "run folders, configuration and logs kept in $keep"
  fi
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- packages and programs ----------------------------------------------------
missing=()
for p in slurm-wlm munge; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [ ! -x "$build_dir/bin/dctrain-launch" ]; then
  say "no $build_dir/bin/dctrain-launch: building with tools/setup.sh"
  bash "$root/tools/setup.sh" >"$work/setup.log" 2>&1 || { tail -n 30 "$work/setup.log"; fail "tools/setup.sh failed"; }
fi
say "$(slurmctld -V), $(munged -V | head -n 1), programs from $build_dir/bin"

# --- a one-node cluster in $work ----------------------------------------------
# A TCP port nobody listens on (checked against ss); the kernel's ephemeral
# range is left alone.
free_port() {
  local port
  while :; do
    port=$((20000 + RANDOM % 20000))
    ss -Htln "sport = :$port" | grep -q . || { echo "$port"; return; }
  done
}
mkdir -p "$work/munge" "$work/state" "$work/spool"
chmod 755 "$work/munge"  # munged wants its socket's folder searchable by all
dd if=/dev/urandom of="$work/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$work/munge/munge.key"
munged --force --foreground --key-file="$work/munge/munge.key" --socket="$work/munge/munge.socket" \
  --pid-file="$work/munge/munged.pid" --log-file="$work/munge/munged.log" \
  --seed-file="$work/munge/munged.seed" >"$work/munge/munged.out" 2>&1 &
pids+=($!)
for _ in $(seq 40); do [ -S "$work/munge/munge.socket" ] && break; sleep 0.25; done
[ -S "$work/munge/munge.socket" ] || { cat "$work/munge/munged.log"; fail "munged did not start (log above)"; }

ctld_port=$(free_port)
slurmd_port=$(free_port)
export SLURM_CONF="$work/slurm.conf"
cat >"$SLURM_CONF" <<EOF
ClusterName=dctrain-test
SlurmctldHost=localhost
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$work/munge/munge.socket
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
CommunicationParameters=NoInAddrAny,NoCtldInAddrAny
KillWait=10
SlurmdParameters=config_overrides
NodeName=localhost NodeAddr=127.0.0.1 CPUs=8 State=UNKNOWN
PartitionName=test Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
slurmctld -D -i -f "$SLURM_CONF" >"$work/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -N localhost -f "$SLURM_CONF" >"$work/slurmd.out" 2>&1 &
pids+=($!)
state=""
for _ in $(seq 120); do
  state=$(sinfo -h -n localhost -o %t 2>/dev/null || true)
  [ "$state" = idle ] && break
  sleep 0.5
done
if [ "$state" != idle ]; then
  tail -n 20 "$work/slurmctld.log" "$work/slurmd.log" "$work/slurmctld.out" "$work/slurmd.out" 2>/dev/null
  fail "the node is not idle after 60 s (state '$state'; logs above)"
fi
say "cluster up: slurmctld on port $ctld_port, slurmd on $slurmd_port, node localhost idle ($(sinfo -h -o '%c CPUs, partition %P'))"

# --- the plain run --------------------------------------------------------------
say "plain run: dctrain-launch, $workers workers, mnist-cnn, $steps steps"
begin=$(date +%s)
"$build_dir/bin/dctrain-launch" --workers "$workers" --config "$root/experiments/mnist-cnn.cfg" \
  --out "$work/plain" --data-dir "$data" --steps "$steps" >"$work/plain.log" 2>&1 ||
  { tail -n 30 "$work/plain.log"; fail "the plain run failed (log above)"; }
# A top-level field of summary.json (one per line, indented by one space).
field() { sed -n "s/^ \"$2\": \"\{0,1\}\([^\",]*\)\"\{0,1\},\{0,1\}\$/\1/p" "$1" | head -n 1; }
say "plain run done in $(($(date +%s) - begin)) s: accuracy $(field "$work/plain/summary.json" final_eval_accuracy)"

# --- the batch job ----------------------------------------------------------------
# CURVE on every connection: keys for the job, as a user would make them.
"$build_dir/bin/dctrain-keygen" --dir "$work/keys" coordinator worker >/dev/null ||
  fail "dctrain-keygen failed"
export DCTRAIN_KEYS="$work/keys"
say "sbatch --wait --nodes=1 --ntasks=$workers --cpus-per-task=1 docker/slurm/dctrain.sbatch (DCTRAIN_PORT='*')"
begin=$(date +%s)
set +e
DCTRAIN_PORT='*' PATH="$build_dir/bin:$PATH" sbatch --parsable --wait --nodes=1 --ntasks="$workers" \
  --cpus-per-task=1 --output="$work/job-%j.out" --chdir="$work" \
  "$root/docker/slurm/dctrain.sbatch" "$root/experiments/mnist-cnn.cfg" "$data" "$work/slurm" \
  --steps "$steps" >"$work/sbatch.out" 2>&1
code=$?
set -e
job=$(head -n 1 "$work/sbatch.out" | grep -o '^[0-9]*' || true)
say "job ${job:-?} ended with status $code in $(($(date +%s) - begin)) s"
[ -n "$job" ] && [ -f "$work/job-$job.out" ] && tail -n 8 "$work/job-$job.out" | sed 's/^/    /'
[ "$code" = 0 ] || { cat "$work/sbatch.out"; tail -n 30 "$work/job-$job.out" 2>/dev/null; fail "the batch job failed (status $code)"; }
job=""

summary="$work/slurm/summary.json"
[ -f "$summary" ] || fail "the job wrote no summary.json"
say "slurm run: accuracy $(field "$summary" final_eval_accuracy) (plain $(field "$work/plain/summary.json" final_eval_accuracy)), steps $(field "$summary" steps), samples lost $(field "$summary" samples_lost), workers $(grep -o '"name": "worker-[0-9]*"' "$summary" | sed 's/"name": //' | tr -d '"' | sort | tr '\n' ' ')"
[ "$(field "$summary" steps)" = "$steps" ] || fail "the job did $(field "$summary" steps) steps, not $steps"
[ "$(field "$summary" samples_lost)" = 0 ] || fail "the job lost samples"
for ((w = 0; w < workers; w++)); do
  grep -q "\"name\": \"worker-$w\"" "$summary" || fail "worker-$w (task $w) is not in summary.json"
done
losses() { grep '"type":"step"' "$1" | grep -o '"loss":[^,]*'; }
cmp -s <(losses "$work/plain/metrics.jsonl") <(losses "$work/slurm/metrics.jsonl") ||
  fail "the step losses differ from the plain run's (same binaries and libraries: they must not)"
[ "$(field "$summary" final_eval_loss)" = "$(field "$work/plain/summary.json" final_eval_loss)" ] ||
  fail "the final eval loss differs from the plain run's"
say "slurm run: all $steps step losses and the final eval loss equal the plain run's, bit for bit"

# --- scancel: SIGTERM to every task ------------------------------------------------
cancel_at=$((steps / 6))
say "cancelled job: the same batch script, scancel once step $cancel_at is done"
DCTRAIN_PORT='*' PATH="$build_dir/bin:$PATH" sbatch --parsable --nodes=1 --ntasks="$workers" \
  --cpus-per-task=1 --output="$work/job-%j.out" --chdir="$work" \
  "$root/docker/slurm/dctrain.sbatch" "$root/experiments/mnist-cnn.cfg" "$data" "$work/cancel" \
  --steps "$steps" >"$work/sbatch-cancel.out" 2>&1 || { cat "$work/sbatch-cancel.out"; fail "sbatch failed"; }
job=$(grep -o '^[0-9]*' "$work/sbatch-cancel.out" | head -n 1)
begin=$(date +%s)
steps_in() {
  local n
  n=$(grep -c '"type":"step"' "$1" 2>/dev/null) || true
  echo "${n:-0}"
}
until [ "$(steps_in "$work/cancel/metrics.jsonl")" -ge "$cancel_at" ]; do
  squeue -h -j "$job" 2>/dev/null | grep -q . || { tail -n 30 "$work/job-$job.out"; fail "job $job ended before step $cancel_at"; }
  [ $(($(date +%s) - begin)) -lt 300 ] || fail "job $job did not reach step $cancel_at in 300 s"
  sleep 1
done
scancel "$job"
begin=$(date +%s)
while squeue -h -j "$job" 2>/dev/null | grep -q .; do
  [ $(($(date +%s) - begin)) -lt 60 ] || fail "job $job still listed 60 s after scancel"
  sleep 0.5
done
say "job $job: scancel at step $(steps_in "$work/cancel/metrics.jsonl"), gone in $(($(date +%s) - begin)) s"
job=""
summary="$work/cancel/summary.json"
[ -f "$summary" ] || { tail -n 20 "$work"/job-*.out; fail "the cancelled coordinator wrote no summary.json"; }
[ "$(field "$summary" stop_reason)" = "interrupted by a signal" ] ||
  fail "stop reason '$(field "$summary" stop_reason)', not 'interrupted by a signal'"
[ "$(field "$summary" samples_lost)" = 0 ] || fail "the cancelled run lost samples"
say "cancelled job: summary.json after $(field "$summary" steps) steps, stop reason '$(field "$summary" stop_reason)', samples lost 0"
say "PASS in $(($(date +%s) - t0)) s"
