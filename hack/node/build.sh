#!/usr/bin/env bash
# Build the Kubernetes components (from the Kubernetes Go modules on the Go module
# proxy) and CoreDNS (its Go module), and install etcd/containerd/runc/CNI from
# Debian. Nothing is downloaded from outside the package registries.
# Cached outside the repo: a second run only checks that the binaries are there.
#   hack/node/build.sh [component ...]    (default: all)
#   components: kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy (kubeadm kubectl: the kind node image) coredns
#               local-path-provisioner pause etcd debs (etcd, containerd, runc, CNI, iptables, conntrack, GlusterFS)
#               argocd (Argo CD: one binary with the two components the node runs + CRDs, from github.com/argoproj/argo-cd/v3; into $ARGOCD_DIR)
#               registry (the CNCF distribution OCI registry: Debian's docker-registry package, its binary
#                         taken out of the .deb, not installed (no service); into $REGISTRY_DIR)
#               kwok (fake nodes and pods for a real control plane, from sigs.k8s.io/kwok, with the Stages the
#                     simulated cluster uses: nodes Ready and heartbeating, pods Running until deleted;
#                     into $KWOK_DIR; tests/bench/bench_sim.py)
#               browser (Debian's chromium + chromium-driver: the notebook's browser test drives them)
#               promtool (Debian's prometheus package, for its promtool: tests/monitoring's `promtool test rules`;
#                         the Prometheus service it ships is left stopped and disabled)
#               cilium (the NetworkPolicy engine: Cilium's agent + CNI plugin, from github.com/cilium/cilium;
#                       its BPF sources, CRDs and Debian's clang-19; into $CILIUM_DIR)
set -euo pipefail
# the Go compiler collects garbage less often: cold builds ~10-18% quicker (tooling/bootstrap.py)
export GOGC=${GOGC:-400}
# and writes no debug information (DWARF) that the linker's -w drops anyway: the binaries are the
# same but for their build id, and a cold build uses less CPU (CONTRIBUTING.md, "The CI budget").
# Every build here also passes -trimpath: builds with the same flags share one compile of Go's
# standard library in the build cache (~40 s of CPU each time it is compiled again).
NODWARF=-gcflags=all=-dwarf=false
# shellcheck source=hack/node/coredns-trim.sh
. "$(dirname "$0")/coredns-trim.sh"  # COREDNS_VERSION, coredns_trim
K8S_VERSION=${K8S_VERSION:-$(cat "$(dirname "$0")/k8s-version")}  # v1.X.Y <-> staging modules v0.X.Y
LOCAL_PATH_VERSION=${LOCAL_PATH_VERSION:-0.0.30}   # Rancher's local-path-provisioner: kind's default storage
ARGOCD_VERSION=${ARGOCD_VERSION:-3.6.1}
ARGOCD_DIR=${ARGOCD_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tf-cluster/argocd-$ARGOCD_VERSION}
REGISTRY_DIR=${REGISTRY_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tf-cluster/registry-debian}
KWOK_VERSION=${KWOK_VERSION:-0.8.0}
KWOK_DIR=${KWOK_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tf-cluster/kwok-$KWOK_VERSION}
CILIUM_VERSION=${CILIUM_VERSION:-1.20.2}
CILIUM_DIR=${CILIUM_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tf-cluster/cilium-$CILIUM_VERSION}
STAGING=v0.${K8S_VERSION#1.}
out=${TF_CLUSTER_E2E_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/tf-cluster/k8s-$K8S_VERSION}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
want=("$@")
if [ ${#want[@]} -eq 0 ]; then
  want=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy coredns local-path-provisioner pause debs argocd registry browser kwok)
  [ "${TF_CLUSTER_NODE_POLICY:-cilium}" = none ] || want+=(cilium)  # the node without a policy engine (node/config.py)
  # TF_CLUSTER_NODE_DEFER (make check): built after `hack/node up`, beside the scenarios (node/deferred.py)
  kept=(); for c in "${want[@]}"; do [[ " ${TF_CLUSTER_NODE_DEFER:-} " == *" $c "* ]] || kept+=("$c"); done
  want=("${kept[@]}")
fi
log() { echo "[e2e-build] $*" >&2; }
cleanups=()
trap 'for d in ${cleanups[@]+"${cleanups[@]}"}; do rm -rf "$d"; done' EXIT
# TF_CLUSTER_GO_SCRATCH=1 (make check sets it): Go's module and build caches for these builds in a
# folder of their own, emptied when the script ends (it logs how many MB). A cold build of every
# component leaves gigabytes there (CONTRIBUTING.md has the figure) that only a rebuild would use:
# the binaries are cached apart, and a CI disk is small. Without it, Go's usual caches.
if [ -n "${TF_CLUSTER_GO_SCRATCH:-}" ]; then
  # one folder per build: a build stopped by a signal empties its own in its EXIT trap, which took
  # minutes and removed the next build's downloads when the folder was shared
  mkdir -p "${XDG_CACHE_HOME:-$HOME/.cache}/tf-cluster"
  scratch=$(mktemp -d "${XDG_CACHE_HOME:-$HOME/.cache}/tf-cluster/go-scratch.XXXXXX")
  export GOCACHE=$scratch/build GOMODCACHE=$scratch/mod
  # the module cache is read-only: go clean removes it (rm -rf fails on it)
  trap 'for d in ${cleanups[@]+"${cleanups[@]}"}; do rm -rf "$d"; done
        du_mb=$(du -sm "$scratch" 2>/dev/null | cut -f1)
        go clean -modcache 2>/dev/null; rm -rf "$scratch"
        log "Go caches of these builds removed (${du_mb:-0} MB; TF_CLUSTER_GO_SCRATCH)"' EXIT
fi
# shellcheck source=hack/node/timing.sh
. "$(dirname "$0")/timing.sh"  # stamp, timing: a line per component in the timing record
need_go() { command -v go >/dev/null || { log "Go is needed to build $1 (install golang)"; exit 1; }; }
APT_LOCK=/run/lock/tf-cluster-apt.lock  # one apt at a time: also install-builder.sh's and hack/node/cli.py's
apt_install() {  # Debian packages, as root; retried once after `apt-get update`
  [ $# -gt 0 ] || return 0
  [ "$(id -u)" = 0 ] || { log "missing Debian packages: sudo apt-get install $*"; exit 1; }
  log "installing from Debian: $*"
  # one apt at a time (make check runs builds side by side): wait for the others' installs
  ( flock 9
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null 2>&1 \
      || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null; }
  ) 9>"$APT_LOCK"
}

k8s=(); other=()
for c in "${want[@]}"; do
  case $c in
    kube-apiserver|kube-controller-manager|kube-scheduler|kubelet|kube-proxy|kubeadm|kubectl) [ -x "$out/$c" ] || k8s+=("$c");;
    coredns|local-path-provisioner|pause|etcd|debs|argocd|registry|kwok|cilium|browser|promtool) other+=("$c");;
    *) log "unknown component '$c'"; exit 2;;
  esac
done


lock_kubernetes() {
  # Two builds into one directory (make check builds the node's components in the background while
  # its kube-apiserver suite asks for kube-apiserver): the second waits, then builds what is missing.
  # Taken before anything else is built, so the first build does all five in one `go build`.
  [ ${#k8s[@]} -gt 0 ] || return 0
  exec 8>"$out/.build.lock"
  if ! flock -n 8; then
    log "waiting for the other build of $out to finish (${k8s[*]} wanted)"; flock 8
    missing=(); for c in "${k8s[@]}"; do [ -x "$out/$c" ] || missing+=("$c"); done
    k8s=(${missing[@]+"${missing[@]}"})
  fi
}

build_kubernetes() {  # the Kubernetes components wanted, in one `go build`
  if [ ${#k8s[@]} -gt 0 ]; then
    t0=$(stamp)
    need_go "${k8s[*]}"
    work=$(mktemp -d); cleanups+=("$work")
    (
    cd "$work"
    log "resolving k8s.io/kubernetes v$K8S_VERSION from the Go module proxy"
    GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" > dl.json
    gomod=$(python3 -c 'import json; print(json.load(open("dl.json"))["GoMod"])')
    # k8s.io/kubernetes replaces its staging modules with ./staging paths; pin them to the published versions.
    { echo "module k8sbuild"; echo; echo "go 1.25"; echo; echo "require k8s.io/kubernetes v$K8S_VERSION"; echo "replace ("
      grep -oE '^\s*k8s\.io/[A-Za-z0-9._-]+ => \./staging' "$gomod" | awk -v v="$STAGING" '{print "\t" $1 " => " $1 " " v}'
      echo ")"; } > go.mod
    { echo '//go:build tools'; echo 'package tools'; for c in "${k8s[@]}"; do echo "import _ \"k8s.io/kubernetes/cmd/$c\""; done; } > tools.go
    log "building ${k8s[*]} v$K8S_VERSION (cold: ~5 min for the first, a few more for each other, on 2 cores)"
    GOFLAGS=-mod=mod go mod tidy
    ldflags="-X k8s.io/component-base/version.gitVersion=v$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${K8S_VERSION#1.}"
    ldflags="-s -w ${ldflags%.*}"  # no symbol table or DWARF: each of the five links is quicker
    pkgs=(); for c in "${k8s[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
    mkdir -p bin
    CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath "$NODWARF" -ldflags "$ldflags" -o bin/ "${pkgs[@]}"
    for c in "${k8s[@]}"; do mv "bin/$c" "$out/$c"; log "$c -> $out/$c"; done
    )
    timing "kubernetes ${k8s[*]}" "$t0"
  fi
  exec 8>&-  # the Kubernetes components are there: a waiting build goes on
}

build_one() {  # build_one COMPONENT: one of the components besides Kubernetes'
  local c=$1 t0
  t0=$(stamp)
  case $c in
    coredns)
      # trimmed (coredns-trim.sh), then a build of the trimmed copy
      if [ ! -x "$out/coredns" ]; then
        need_go coredns
        log "building CoreDNS v$COREDNS_VERSION without its cloud, tracing and etcd plugins (cold: ~3 min)"
        dwork=$(mktemp -d); cleanups+=("$dwork")
        ddir=$(cd "$dwork" && GOFLAGS=-mod=mod go mod download -json "github.com/coredns/coredns@v$COREDNS_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
        coredns_trim "$ddir" "$dwork/src"
        (cd "$dwork/src" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath "$NODWARF" -ldflags "-s -w" -o "$out/coredns.tmp" .)
        mv "$out/coredns.tmp" "$out/coredns"
      fi;;
    local-path-provisioner)
      if [ ! -x "$out/local-path-provisioner" ]; then
        need_go local-path-provisioner
        log "building local-path-provisioner v$LOCAL_PATH_VERSION"
        CGO_ENABLED=0 GOBIN="$out" GOFLAGS=-mod=mod go install -trimpath "$NODWARF" -ldflags "-s -w" "github.com/rancher/local-path-provisioner@v$LOCAL_PATH_VERSION"
      fi;;
    pause)
      # The sandbox ("pause") container: a static binary that sleeps until signalled.
      if [ ! -x "$out/pause" ]; then
        need_go pause
        log "building the pause binary"
        CGO_ENABLED=0 go build -trimpath "$NODWARF" -ldflags "-s -w" -o "$out/pause" "$here/pause/pause.go"
      fi;;
    argocd)
      # Argo CD's go.mod has `replace` directives (its gitops-engine is a nested module), so
      # `go install mod@v` refuses it: download both modules, build inside a writable copy.
      # It asks for Go >= 1.27: GOTOOLCHAIN=auto fetches that toolchain from the module proxy.
      command -v redis-server >/dev/null || apt_install redis-server
      command -v git >/dev/null || apt_install git
      if [ ! -x "$ARGOCD_DIR/argocd" ] || [ ! -x "$ARGOCD_DIR/git-verify-wrapper.sh" ]; then
        need_go argocd
        log "building Argo CD v$ARGOCD_VERSION (application controller + repo server) from github.com/argoproj/argo-cd/v3 (cold: ~5 min on 2 cores; cached after)"
        awork=$(mktemp -d)
        export GOTOOLCHAIN=auto GOFLAGS=-mod=mod
        adir=$(cd "$awork" && go mod download -json "github.com/argoproj/argo-cd/v3@v$ARGOCD_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
        gdir=$(cd "$awork" && go mod download -json "github.com/argoproj/argo-cd/gitops-engine/v3@v$ARGOCD_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
        cp -r "$adir" "$awork/src" && chmod -R u+w "$awork/src" && cp -r "$gdir" "$awork/src/gitops-engine" && chmod -R u+w "$awork/src"
        mkdir -p "$ARGOCD_DIR/crds" "$awork/src/cmd/tf-cluster-e2e"
        # Argo CD's main (./cmd) links every component: the API server, CLI, ApplicationSet and
        # notifications controllers and their cloud SDKs. The node runs two (and git's askpass
        # helper the repo server calls): a main with only those, chosen by name as Argo CD's is.
        cat > "$awork/src/cmd/tf-cluster-e2e/main.go" <<'GO'
package main

import (
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	appcontroller "github.com/argoproj/argo-cd/v3/cmd/argocd-application-controller/commands"
	gitaskpass "github.com/argoproj/argo-cd/v3/cmd/argocd-git-ask-pass/commands"
	reposerver "github.com/argoproj/argo-cd/v3/cmd/argocd-repo-server/commands"
	"github.com/argoproj/argo-cd/v3/common"
	"github.com/argoproj/argo-cd/v3/util/log"
)

func init() {
	klog.SetLogger(log.NewLogrusLogger(log.NewWithCurrentConfig()))
}

// Argo CD's main turns gRPC's SRV lookups off again (util/grpc.DisableSRVLookups), which grpclb
// turns on when a cloud SDK imports it; none of them is linked here, so they are off already.
func main() {
	name := filepath.Base(os.Args[0])
	if v := os.Getenv("ARGOCD_BINARY_NAME"); v != "" {
		name = v
	}
	var command *cobra.Command
	switch name {
	case common.CommandApplicationController:
		command = appcontroller.NewCommand()
	case common.CommandRepoServer:
		command = reposerver.NewCommand()
	case common.CommandGitAskPass:
		command = gitaskpass.NewCommand()
	default:
		os.Stderr.WriteString("this Argo CD build (tf-cluster's e2e node) has only " + common.CommandApplicationController +
			", " + common.CommandRepoServer + " and " + common.CommandGitAskPass + "; not " + name + "\n")
		os.Exit(2)
	}
	if err := command.Execute(); err != nil {
		os.Exit(1)
	}
}
GO
        (cd "$awork/src" && CGO_ENABLED=0 go build -trimpath "$NODWARF" -ldflags "-s -w -X github.com/argoproj/argo-cd/v3/common.version=$ARGOCD_VERSION" -o "$ARGOCD_DIR/argocd.tmp" ./cmd/tf-cluster-e2e)
        cp "$awork/src"/manifests/crds/*-crd.yaml "$ARGOCD_DIR/crds/"
        # the repo server runs it for every commit it renders (Argo CD's image has it on PATH)
        install -m 0755 "$awork/src/hack/git-verify-wrapper.sh" "$ARGOCD_DIR/git-verify-wrapper.sh"
        mv "$ARGOCD_DIR/argocd.tmp" "$ARGOCD_DIR/argocd"
        rm -rf "$awork"; unset GOTOOLCHAIN GOFLAGS
        log "argocd -> $ARGOCD_DIR/argocd"
      fi;;
    registry)
      # Debian's build of CNCF distribution (2.8 on Debian 12), fetched through apt as the machine
      # configures it and unpacked, not installed: its package would start a service on :5000.
      # Building 3.x from its Go module took 255 s of a cold CI's critical path; this takes seconds.
      if [ ! -x "$REGISTRY_DIR/registry" ]; then
        log "fetching Debian's docker-registry (CNCF distribution) into $REGISTRY_DIR"
        rwork=$(mktemp -d); cleanups+=("$rwork")
        # apt_install's lock: an `apt-get update` beside another's install fails on apt's own lock
        ( flock 9; cd "$rwork" && { apt-get download -q docker-registry >/dev/null 2>&1 \
            || { [ "$(id -u)" = 0 ] && apt-get update -qq && apt-get download -q docker-registry >/dev/null; }; }
        ) 9>"$APT_LOCK" \
          || { log "apt-get download docker-registry failed: is a Debian mirror configured? (sudo apt-get update)"; exit 1; }
        dpkg-deb -x "$rwork"/docker-registry_*.deb "$rwork/x"
        dpkg-deb -f "$rwork"/docker-registry_*.deb Version > "$REGISTRY_DIR/version"
        install -m 755 "$rwork/x/usr/bin/docker-registry" "$REGISTRY_DIR/registry.tmp"
        mv "$REGISTRY_DIR/registry.tmp" "$REGISTRY_DIR/registry"
        log "registry $(cat "$REGISTRY_DIR/version") -> $REGISTRY_DIR/registry"
      fi;;
    kwok)
      if [ ! -x "$KWOK_DIR/kwok" ] || [ ! -s "$KWOK_DIR/stages.yaml" ]; then
        need_go kwok
        log "building kwok v$KWOK_VERSION from sigs.k8s.io/kwok (cold: ~3 min on 2 cores)"
        kwork=$(mktemp -d); cleanups+=("$kwork")
        kdir=$(cd "$kwork" && GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/kwok@v$KWOK_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
        mkdir -p "$KWOK_DIR"
        (cd "$kdir" && CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=auto go build -trimpath "$NODWARF" -ldflags "-s -w" -o "$KWOK_DIR/kwok" ./cmd/kwok)
        # kwok's own Stages: nodes initialised and heartbeating through their Lease; pods Ready once
        # bound and gone once deleted. Not pod-complete: a simulated task runs until deleted.
        for f in node/fast/node-initialize node/heartbeat-with-lease/node-heartbeat-with-lease \
                 pod/fast/pod-ready pod/fast/pod-delete; do
          echo "---"; cat "$kdir/kustomize/stage/$f.yaml"
        done > "$KWOK_DIR/stages.yaml"
      fi;;
    cilium)
      # The agent compiles its BPF programs when it starts, with clang >= 18.1 (Debian 12's
      # clang is 14): clang-19 from Debian, put on the agent's PATH as clang/llc by the harness.
      { command -v clang-19 >/dev/null && command -v llc-19 >/dev/null; } || apt_install clang-19 llvm-19
      if [ ! -x "$CILIUM_DIR/cilium-agent" ] || [ ! -x "$CILIUM_DIR/cilium-cni" ] || [ ! -d "$CILIUM_DIR/bpf" ]; then
        need_go cilium
        log "building Cilium v$CILIUM_VERSION (agent + CNI plugin) from github.com/cilium/cilium (cold: ~11 min on 2 cores; cached after)"
        cwork=$(mktemp -d)
        export GOTOOLCHAIN=auto GOFLAGS=-mod=mod
        cdir=$(cd "$cwork" && go mod download -json "github.com/cilium/cilium@v$CILIUM_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
        cp -r "$cdir" "$cwork/src" && chmod -R u+w "$cwork/src"
        # Two dependencies the Go proxy refuses (403): gobgp/v4's pseudo-version (BGP is not
        # used here; v4.8.0 is the one v4 release served) and sigs.k8s.io/mcs-api/controllers,
        # of which Cilium reads one constant: a local module holding it.
        mkdir -p "$cwork/mcs-controllers"
        printf 'module sigs.k8s.io/mcs-api/controllers\n\ngo 1.24\n' > "$cwork/mcs-controllers/go.mod"
        printf '// The one constant Cilium reads from this module (refused by the Go proxy).\npackage controllers\n\nconst DerivedServiceAnnotation = "multicluster.kubernetes.io/derived-service"\n' \
          > "$cwork/mcs-controllers/controllers.go"
        (cd "$cwork/src" && go mod edit -replace github.com/osrg/gobgp/v4=github.com/osrg/gobgp/v4@v4.8.0 \
           -replace "sigs.k8s.io/mcs-api/controllers=$cwork/mcs-controllers" \
         && CGO_ENABLED=0 go build -trimpath "$NODWARF" -ldflags "-s -w" -o "$cwork/cilium-agent" ./daemon \
         && CGO_ENABLED=0 go build -trimpath "$NODWARF" -ldflags "-s -w" -o "$cwork/cilium-cni" ./plugins/cilium-cni)
        rm -rf "$CILIUM_DIR" && mkdir -p "$CILIUM_DIR/crds"
        cp -r "$cwork/src/bpf" "$CILIUM_DIR/bpf"
        cp "$cwork/src"/pkg/k8s/apis/cilium.io/client/crds/v2/*.yaml "$cwork/src"/pkg/k8s/apis/cilium.io/client/crds/v2alpha1/*.yaml "$CILIUM_DIR/crds/"
        mv "$cwork/cilium-cni" "$cwork/cilium-agent" "$CILIUM_DIR/"
        rm -rf "$cwork"; unset GOTOOLCHAIN GOFLAGS
        log "cilium-agent, cilium-cni -> $CILIUM_DIR"
      fi;;
    etcd)
      command -v etcd >/dev/null || apt_install etcd-server;;
    promtool)
      # without its recommends (node-exporter, another service); where the package's postinst
      # started Prometheus (a booted init system, no policy-rc.d), stop and disable it
      if ! command -v promtool >/dev/null; then
        apt_install --no-install-recommends prometheus
        if [ -d /run/systemd/system ]; then systemctl disable --now prometheus >/dev/null 2>&1 || true
        else { invoke-rc.d prometheus stop; update-rc.d prometheus disable; } >/dev/null 2>&1 || true; fi
      fi;;
    browser)
      { command -v chromium >/dev/null && command -v chromedriver >/dev/null; } \
        || apt_install chromium chromium-driver fonts-dejavu-core;;
    debs)
      pkgs=()
      command -v etcd >/dev/null || pkgs+=(etcd-server)
      command -v containerd >/dev/null || pkgs+=(containerd)
      command -v runc >/dev/null || pkgs+=(runc)
      [ -x /usr/lib/cni/bridge ] || [ -x /usr/libexec/cni/bridge ] || pkgs+=(containernetworking-plugins)
      command -v iptables >/dev/null || pkgs+=(iptables)
      command -v conntrack >/dev/null || pkgs+=(conntrack)
      # the shared storage's server and FUSE client (node/storage.py)
      [ -x /usr/sbin/glusterd ] || pkgs+=(glusterfs-server)
      [ -x /usr/sbin/glusterfs ] || pkgs+=(glusterfs-client)
      apt_install ${pkgs[@]+"${pkgs[@]}"};;
  esac
  timing "$c" "$t0"
}

# The registry first (seconds): `make test`'s TFJob-migration tests need it, and wait for it while
# its lock is held (tests/tooling/test_from_tfjob.py) rather than skip.
lock_kubernetes
rest=()
for c in ${other[@]+"${other[@]}"}; do
  if [ "$c" = registry ]; then
    mkdir -p "$REGISTRY_DIR"; exec 7>"$REGISTRY_DIR/.build.lock"; flock 7
    build_one registry
    exec 7>&-
  else
    rest+=("$c")
  fi
done
build_kubernetes
for c in ${rest[@]+"${rest[@]}"}; do build_one "$c"; done
echo "$out"
