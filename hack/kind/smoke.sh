#!/usr/bin/env bash
# `tf-cluster smoke --kind` as a user runs it, from no cluster to a deleted one, on this machine:
# kind v0.33.0 (built from its Go module) through its podman provider, with the kind node image
# made here (build-node-image.sh: no registry pull) and the trainer image `make image` built.
#   bash hack/kind/smoke.sh [values.yaml ...]     (root; RUNS=3 for three in a row)
# Default values: values-examples/mwms-cpu.yaml with tests/e2e/cluster/values-small-node.yaml (its
# requests sized for a 2-core machine next to kind's control plane).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
CLUSTER=${KIND_CLUSTER:-tf-cluster-kind}
NETWORK=${KIND_NETWORK:-tf-cluster-kind}
SUBNET=${KIND_SUBNET:-10.89.7.0/24}   # apart from the node harness's 10.244/10.96 and kind's defaults
RUNS=${RUNS:-1}
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/tf-cluster/kind-v0.33.0
values=("$@"); [ ${#values[@]} -gt 0 ] || values=("$root/values-examples/mwms-cpu.yaml" "$root/tests/e2e/cluster/values-small-node.yaml")
say() { echo "[kind $(date +%T)] $*" >&2; }

t=$(date +%s)
node_image=$(bash "$here/build-node-image.sh" | tail -1)
say "node image $node_image ($(( $(date +%s) - t ))s; cached after the first build)"
# kind's podman provider, with the podman this host needs (runc, cgroupfs, ulimits it may set) first
export PATH="$CACHE:$here/bin:$PATH" KIND_EXPERIMENTAL_PROVIDER=podman KIND_EXPERIMENTAL_PODMAN_NETWORK=$NETWORK
# an IPv4-only network made first: kind's own is created with --ipv6, which turns on host-wide IPv6 forwarding
podman network exists "$NETWORK" || podman network create -d bridge --subnet "$SUBNET" "$NETWORK" >/dev/null
trap 'kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true; podman network rm -f "$NETWORK" >/dev/null 2>&1 || true' EXIT
args=(); for v in "${values[@]}"; do args+=(-f "$v"); done
for i in $(seq "$RUNS"); do
  say "run $i/$RUNS: tf-cluster smoke --kind $CLUSTER (create, load, install, wait, helm test, uninstall, delete)"
  t=$(date +%s)
  "$root/.venv/bin/tf-cluster" smoke --kind "$CLUSTER" --kind-node-image "$node_image" \
    --kind-config "$here/kind-cluster.yaml" --base "${BASE:-localhost/tf-cluster-base:bookworm}" \
    --delete-cluster "${args[@]}"
  say "run $i/$RUNS passed in $(( $(date +%s) - t ))s"
done
