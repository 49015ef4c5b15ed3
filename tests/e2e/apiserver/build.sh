#!/usr/bin/env bash
# Build kube-apiserver from the Kubernetes Go modules (the Go module proxy) and
# install etcd from Debian, for the API-level e2e tests. Cached: a second run is instant.
#   tests/e2e/apiserver/build.sh [out-dir]
set -euo pipefail
K8S_VERSION=${K8S_VERSION:-1.35.4}          # k8s.io/kubernetes v1.X.Y <-> staging modules v0.X.Y
STAGING=v0.${K8S_VERSION#1.}
out=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/tf-cluster/k8s-$K8S_VERSION}
mkdir -p "$out"
if [ -x "$out/kube-apiserver" ]; then echo "[e2e] kube-apiserver $K8S_VERSION cached in $out"; else
  command -v go >/dev/null || { echo "[e2e] Go is needed to build kube-apiserver" >&2; exit 1; }
  work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
  cd "$work"
  echo "[e2e] resolving k8s.io/kubernetes v$K8S_VERSION from the Go module proxy"
  GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" > dl.json
  gomod=$(python3 -c 'import json,sys; print(json.load(open("dl.json"))["GoMod"])')
  # k8s.io/kubernetes replaces its staging modules with ./staging paths; pin them to the published versions.
  { echo "module k8sbuild"; echo; echo "go 1.25"; echo; echo "require k8s.io/kubernetes v$K8S_VERSION"; echo "replace ("
    grep -oE '^\s*k8s\.io/[A-Za-z0-9._-]+ => \./staging' "$gomod" | awk -v v="$STAGING" '{print "\t" $1 " => " $1 " " v}'
    echo ")"; } > go.mod
  printf '//go:build tools\npackage tools\nimport _ "k8s.io/kubernetes/cmd/kube-apiserver"\n' > tools.go
  echo "[e2e] building kube-apiserver v$K8S_VERSION (cold: ~5 min on 2 cores)"
  GOFLAGS=-mod=mod go mod tidy
  ldflags="-X k8s.io/component-base/version.gitVersion=v$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${K8S_VERSION#1.}"
  ldflags="${ldflags%.*}"
  CGO_ENABLED=0 GOFLAGS=-mod=mod go build -ldflags "$ldflags" -o "$out/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
  echo "[e2e] kube-apiserver -> $out/kube-apiserver"
fi
if ! command -v etcd >/dev/null; then
  echo "[e2e] installing etcd-server from Debian"
  if [ "$(id -u)" != 0 ]; then echo "[e2e] etcd missing: sudo apt-get install etcd-server" >&2; exit 1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server >/dev/null 2>&1 \
    || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server >/dev/null; }
fi
echo "$out"
