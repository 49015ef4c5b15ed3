#!/usr/bin/env bash
# What leaving DWARF out of Go builds saves (NO_DWARF in tooling/bootstrap.py, NODWARF in
# hack/node/build.sh): CoreDNS, trimmed as hack/node/build.sh trims it, built from an empty build
# cache four times, A B B A (A: as before, with DWARF; B: -gcflags=all=-dwarf=false), with
# GOGC=400 as the project's builds; one line per build with its wall and CPU seconds. The order and
# the count are fixed here, before any run. Its modules are downloaded first (not timed).
#   hack/go-dwarf-ab.sh [work-dir]       (default: a temporary folder, removed at the end)
set -euo pipefail
# shellcheck source=hack/node/coredns-trim.sh
. "$(dirname "$0")/node/coredns-trim.sh"  # COREDNS_VERSION, coredns_trim: build.sh's
work=${1:-$(mktemp -d)}
[ -n "${1:-}" ] || trap 'go clean -modcache 2>/dev/null; rm -rf "$work"' EXIT
mkdir -p "$work"
export GOMODCACHE=$work/mod GOFLAGS=-mod=mod GOTOOLCHAIN=local GOGC=400 CGO_ENABLED=0
dir=$(cd "$work" && go mod download -json "github.com/coredns/coredns@v$COREDNS_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
GOCACHE=$work/prep coredns_trim "$dir" "$work/src"
cd "$work/src" && go mod download
for v in A B B A; do
  rm -rf "$work/cache"; export GOCACHE=$work/cache
  if [ "$v" = A ]; then gc=(); else gc=(-gcflags=all=-dwarf=false); fi
  /usr/bin/time -f "$v wall=%es cpu=user %Us + sys %Ss" go build -trimpath ${gc[@]+"${gc[@]}"} -ldflags "-s -w" -o "$work/coredns-$v" . 2>&1 | tail -1
done
