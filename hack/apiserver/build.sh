#!/usr/bin/env bash
# kube-apiserver (built from the Kubernetes Go modules) and etcd (Debian) for the API-level
# e2e tests: two of the components hack/node/build.sh makes for the real node, into
# the same cache; and Debian's promtool for tests/monitoring (`make test` runs this script).
# A second run only checks that they are there.
#   hack/apiserver/build.sh [out-dir]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
K8S_VERSION=${K8S_VERSION:-1.29.15}  # the oldest Kubernetes the chart supports
export TF_CLUSTER_E2E_BIN=${1:-${TF_CLUSTER_E2E_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/tf-cluster/k8s-$K8S_VERSION}}
exec bash "$here/../node/build.sh" kube-apiserver etcd promtool
