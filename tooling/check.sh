#!/usr/bin/env bash
# `make check`, what CI runs (.ci/run): `make test`, then the real-node scenarios (`make e2e`),
# without the tests marked `extended`, ending with the timing table (tooling/timings.py).
#
# What the e2e node needs is built while `make test` runs: its components (Go builds, CPU-bound;
# hack/node/build.sh, which waits for a second build into the same directory and lets one
# apt-get run at a time) start at once, the trainer image and the stand-ins of the official ones (downloads mostly) once
# the virtualenv is there, then imported into every node's containerd (`hack/node preload`).
# `make test` runs its kube-apiserver suite on the node's Kubernetes:
# one Kubernetes build for both (`make check-all` runs the suite on the oldest supported too).
#   tooling/check.sh NODE_K8S_VERSION [MARK]
set -uo pipefail
cd "$(dirname "$0")/.."
node_k8s=${1:?usage: tooling/check.sh NODE_K8S_VERSION [MARK]}
mark=${2-not extended}
export TF_CLUSTER_TIMINGS=$PWD/build/timings.tsv
# everything is built here, so a missing component of the harness fails its scenarios (tests/needs.py)
export CI=${CI:-true}
# kwok is first used after the lanes (test_scale.py): built once the node is up, beside the scenarios,
# rather than before it (hack/node/deferred.py; test_scale.py waits for that build)
export TF_CLUSTER_NODE_DEFER=${TF_CLUSTER_NODE_DEFER-kwok}
# the harness's Go processes collect garbage less often (hack/node/proc.py GO_ENV): ~12 % less of
# their CPU in a scenario measured twice each way, CPU the scenarios beside them then have
export TF_CLUSTER_NODE_GOGC=${TF_CLUSTER_NODE_GOGC-400}
mkdir -p build
python3 tooling/timings.py start
TIME=(python3 tooling/timings.py run)
say() { echo "[check] $*"; }
rc=0
pids=()

background() {  # background NAME LOG ARGV...: its own process group, so a failure can stop all of it
  local name=$1 log=$2; shift 2
  say "$name: started in the background (log: $log)"
  setsid "${TIME[@]}" "$name" -- "$@" > "$log" 2>&1 &
  pids+=("$!")
}

finish() {  # finish PID NAME LOG: wait for it, showing its last step every 30 s; its steps after
  local pid=$1 name=$2 log=$3 n=0 status
  while kill -0 "$pid" 2>/dev/null; do
    sleep 5; n=$((n + 5))
    if [ $((n % 30)) = 0 ]; then
      say "waiting for $name (${n}s): $(grep -E '^\[(e2e-build|image|base|build|node)' "$log" | tail -1 | cut -c1-150)"
    fi
  done
  wait "$pid"; status=$?
  grep -E '^\[(e2e-build|image|base)\]|^\[build\] built|images preloaded' "$log" | sed "s/^/[check] $name: /"
  if [ "$status" != 0 ]; then
    say "$name FAILED (exit $status); the end of $log:"; tail -40 "$log"
  fi
  return "$status"
}

# Free disk where the builds, the image stores and the node write (all under / here), logged at
# the start, once the builds are done and at the end: a cold run writes ~NEED_GB (the venvs, the
# images in podman and in three containerd stores, the node's data; its Go caches are removed as
# soon as its builds end: TF_CLUSTER_GO_SCRATCH). Less than that free: a warning saying so.
NEED_GB=30
disk() {  # disk WHEN
  local avail size
  read -r avail size < <(df -Pk "$HOME" /var/lib 2>/dev/null | awk 'NR>1 {print $4, $2}' | sort -n | head -1)
  say "disk $1: $((avail / 1048576)) GB free of $((size / 1048576)) GB"
  if [ "$1" = "at the start" ] && [ "$avail" -lt $((NEED_GB * 1048576)) ]; then
    say "WARNING: a cold run writes about $NEED_GB GB and only $((avail / 1048576)) GB is free: builds or"
    say "  pods may fail for want of space. Free some (podman system prune; hack/node down --purge) or"
    say "  run on a larger disk."
  fi
}

stop_background() {
  for pid in ${pids[@]+"${pids[@]}"}; do kill -- "-$pid" 2>/dev/null; done
}

# How busy the two cores were, minute by minute (the cold run's critical path is CPU-bound while
# the builds run beside `make test`; idle minutes are room to overlap more): a line at the end.
vmstat -n 60 > build/cpu.log 2>/dev/null &
vmstat_pid=$!
trap 'kill "$vmstat_pid" 2>/dev/null' EXIT
disk "at the start"
background "node components" build/node-build.log env K8S_VERSION="$node_k8s" TF_CLUSTER_GO_SCRATCH=1 bash hack/node/build.sh
nb=${pids[-1]}
make --no-print-directory setup || rc=$?
if [ "$rc" = 0 ]; then
  # then every node's containerd with those images (hack/node preload): mostly writes, beside the
  # CPU-bound builds, instead of on the critical path in `make e2e`'s `up` (112 s of 137 s cold)
  background "images" build/images.log bash -c "make --no-print-directory e2e-images && ${TIME[*]} preload -- \
    .venv/bin/python hack/node preload --wait 3600"
  im=${pids[-1]}
  preloaded=1
  # the modules tests/e2e/lanes.py's LATER names run in `make e2e` instead (TF_CLUSTER_E2E_LATER),
  # on a core the scenarios that run alone leave idle, not beside the builds
  later=$(python3 tests/e2e/lanes.py --later-ignores)
  say "make test leaves ${later//--ignore=/} to make e2e (beside the scenarios that run alone)"
  "${TIME[@]}" test -- make --no-print-directory test MARK="$mark" K8S_API_VERSION="$node_k8s" \
    PYTEST_ARGS="$later ${PYTEST_ARGS:-}" || rc=$?
fi
if [ "$rc" != 0 ]; then
  say "stopping the background builds: an earlier step failed"
  stop_background
  # the containerds the preload started (their own sessions): `make e2e` would have stopped them
  [ -z "${preloaded:-}" ] || .venv/bin/python hack/node down >/dev/null 2>&1
else
  finish "$im" "images" build/images.log || rc=$?
  finish "$nb" "node components" build/node-build.log || rc=$?
  disk "once the builds are done"
fi
if [ "$rc" = 0 ]; then
  # (the deferred builds' Go caches are emptied when they end, as the node components' are)
  "${TIME[@]}" e2e -- env TF_CLUSTER_GO_SCRATCH=1 TF_CLUSTER_E2E_LATER=1 make --no-print-directory e2e MARK="$mark" || rc=$?
fi
disk "at the end"
kill "$vmstat_pid" 2>/dev/null
# vmstat's first line is the average since boot: skip it; the idle column is the 15th
say "CPU idle by minute (%): $(awk 'NR > 3 && $15 ~ /^[0-9]+$/ {printf "%s ", $15}' build/cpu.log)"
# the run's CPU work in core-minutes, against what the cores could give in its minutes: a run whose
# cores were busy throughout cannot be faster than its work / cores, whatever runs beside what
cores=$(nproc)
say "CPU work: $(awk -v c="$cores" 'NR > 3 && $15 ~ /^[0-9]+$/ {n++; busy += (100 - $15) / 100 * c}
  END {printf "%.0f core-minutes busy of %.0f in %d minutes on %d cores", busy, n * c, n, c}' build/cpu.log)"
python3 tooling/timings.py report
exit "$rc"
