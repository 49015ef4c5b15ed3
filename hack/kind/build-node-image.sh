#!/usr/bin/env bash
# Build a kind (v0.33.0) node image for the e2e node's Kubernetes (hack/node/k8s-version)
# entirely on this machine: no image is pulled from a registry. Inputs come only from Debian (debootstrap/apt), the Go module proxy and
# the project's caches (~/.cache/tf-cluster/k8s-$K8S_VERSION from hack/node/build.sh).
# No kindnetd: the node image carries a static bridge CNI config (cni-bridge.conflist) and the
# cluster is made with networking.disableDefaultCNI: true (kind-cluster.yaml).
#
#   ./build-node-image.sh            build (idempotent: cached outputs are reused)
#   FORCE_NODE=1 ./build-node-image.sh   rebuild only the node image
#
# Outputs (cache, outside any repo): $CACHE (binaries, image archives, tarball, docker shim)
#   podman: localhost/kind-slim:$BASE_TAG   (iptables userland for kube-proxy and local-path-helper)
#           localhost/kind-base:$BASE_TAG   (kind's base image recipe on Debian bookworm)
#           $NODE_IMAGE                     (the node image: `kind create cluster --image ...`)
# Every build step runs under `nice -n 19`, one at a time (shared 2-core machine).
set -euo pipefail
# the Go compiler collects garbage less often: cold builds ~10-18% quicker (tooling/bootstrap.py)
export GOGC=${GOGC:-400}

KIND_VERSION=${KIND_VERSION:-v0.33.0}
K8S_VERSION=${K8S_VERSION:-$(cat "$(dirname "$0")/../node/k8s-version")}  # the e2e node's
CRICTL_VERSION=${CRICTL_VERSION:-v1.36.0}             # kind v0.33.0 base Dockerfile: CRICTL_VERSION
ETCD_VERSION=${ETCD_VERSION:-3.7.0}                   # kubeadm 1.37 DefaultEtcdVersion 3.7.0-0
COREDNS_VERSION=${COREDNS_VERSION:-1.14.6}            # kubeadm 1.37 CoreDNSVersion
CACHE=${CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tf-cluster/kind-$KIND_VERSION}
K8S_BIN=${K8S_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/tf-cluster/k8s-$K8S_VERSION}  # hack/node/build.sh output
here=$(cd "$(dirname "$0")" && pwd)
PODMAN=(podman --runtime runc --cgroup-manager cgroupfs)   # crun fails on this hybrid cgroup layout
NICE=(nice -n 19)
export GOFLAGS=-mod=mod CGO_ENABLED=0

# kind's pinned image names (pkg/build/nodeimage/const_*.go, images/base/files/etc/containerd/config.toml)
KINDNETD_IMAGE=docker.io/kindest/kindnetd:v20260820-69b56db7   # NOT shipped: kind's pre-pull of it is skipped
LPP_IMAGE=docker.io/kindest/local-path-provisioner:v20260820-69b56db7
LPH_IMAGE=docker.io/kindest/local-path-helper:v20260131-7181c60a
SANDBOX_IMAGE=registry.k8s.io/pause:3.10   # kind replaces kubeadm's pause (3.10.2) with containerd's sandbox_image
ETCD_IMAGE=registry.k8s.io/etcd:$ETCD_VERSION-0
COREDNS_IMAGE=registry.k8s.io/coredns/coredns:v$COREDNS_VERSION

T0=$(date +%s); tstep=$T0
log() { echo "[kind-node $(date +%H:%M:%S) +$(( $(date +%s) - T0 ))s] $*" >&2; }
step() { local now; now=$(date +%s); log "== $* (previous step took $(( now - tstep ))s)"; tstep=$now; }
[ "$(id -u)" = 0 ] || { log "run as root (debootstrap, rootful podman)"; exit 1; }
mkdir -p "$CACHE/bin" "$CACHE/images" "$CACHE/ctx"

# ---------------------------------------------------------------- 1. kind CLI
step "kind $KIND_VERSION CLI"
if [ ! -x "$CACHE/kind" ]; then
  GOBIN="$CACHE" "${NICE[@]}" go install "sigs.k8s.io/kind@$KIND_VERSION"
fi
KIND_SRC=$(cd /tmp && go mod download -json "sigs.k8s.io/kind@$KIND_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
log "kind: $("$CACHE/kind" version); source $KIND_SRC"

# ---------------------------------------------------------------- 2. Go binaries
step "Go binaries (kubeadm, kubectl, crictl, etcd, coredns)"
# the node harness's components (cached: built by `make e2e` already, else here) + kubeadm and kubectl
TF_CLUSTER_E2E_BIN="$K8S_BIN" K8S_VERSION="$K8S_VERSION" "${NICE[@]}" bash "$here/../node/build.sh" \
  kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubeadm kubectl pause local-path-provisioner >/dev/null
for c in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubeadm kubectl pause local-path-provisioner; do
  [ -x "$K8S_BIN/$c" ] || { log "missing $K8S_BIN/$c: run tf-cluster's hack/node/build.sh first"; exit 1; }
done
if [ ! -x "$CACHE/bin/crictl" ]; then
  log "building crictl $CRICTL_VERSION (sigs.k8s.io/cri-tools)"
  GOBIN="$CACHE/bin" "${NICE[@]}" go install -trimpath \
    -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$CRICTL_VERSION" "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION"
fi
if [ ! -x "$CACHE/bin/etcd" ]; then
  # go.etcd.io/etcd/server/v3 has `replace` directives (go install refuses): build from a wrapper module.
  log "building etcd v$ETCD_VERSION (go.etcd.io/etcd/server/v3)"
  w=$(mktemp -d)
  ( cd "$w"
    printf 'module etcdbuild\n\ngo 1.25\n\nrequire go.etcd.io/etcd/server/v3 v%s\n' "$ETCD_VERSION" > go.mod
    printf '//go:build tools\npackage tools\nimport _ "go.etcd.io/etcd/server/v3"\n' > tools.go
    "${NICE[@]}" go mod tidy
    "${NICE[@]}" go build -trimpath -ldflags "-s -w" -o "$CACHE/bin/etcd" go.etcd.io/etcd/server/v3 )
  rm -rf "$w"
fi
if [ ! -x "$CACHE/bin/coredns" ]; then
  log "building CoreDNS v$COREDNS_VERSION"
  GOBIN="$CACHE/bin" "${NICE[@]}" go install -trimpath -ldflags "-s -w" "github.com/coredns/coredns@v$COREDNS_VERSION"
fi
# ---------------------------------------------------------------- 3. base images
# Tag = hash of the recipe: kind's base files, the package lists, crictl and this script's base section.
# Contents and file names only, never where the checkout or the cache is: any clone finds the same tags.
SLIM_PKGS=bash,ca-certificates,iptables,nftables,conntrack,iproute2,kmod,procps
BASE_PKGS=(systemd dbus conntrack iptables nftables iproute2 ethtool util-linux mount kmod libseccomp2 pigz fuse-overlayfs
           e2fsprogs bash ca-certificates curl jq procps containerd runc containernetworking-plugins)
BASE_REV=6   # bump when the recipe below changes in a way the hash does not see
BASE_TAG=bookworm-$( { echo "$BASE_REV $KIND_VERSION $CRICTL_VERSION $SLIM_PKGS ${BASE_PKGS[*]}"; sha256sum < "$CACHE/bin/crictl";
  (cd "$KIND_SRC/images/base/files" && find . -type f | sort | xargs sha256sum); (cd "$here" && sha256sum iptables-wrapper cni-bridge.conflist); } | sha256sum | cut -c1-12)
SLIM_IMAGE=localhost/kind-slim:$BASE_TAG
BASE_IMAGE=localhost/kind-base:$BASE_TAG
step "base images $SLIM_IMAGE, $BASE_IMAGE"
if ! podman image exists "$BASE_IMAGE" || ! podman image exists "$SLIM_IMAGE"; then
  w=$(mktemp -d /var/tmp/kind-base.XXXXXX)
  cleanup() { umount "$w/rootfs/proc" 2>/dev/null || true; rm -rf "$w"; }
  trap cleanup EXIT
  mirror=$(bash "$here/../../images/base/debian-mirror.sh" bookworm)  # the machine's apt source, or DEBIAN_MIRROR
  log "debootstrap bookworm minbase (+ $SLIM_PKGS) from $mirror into $w/rootfs"
  "${NICE[@]}" debootstrap --variant=minbase --include="$SLIM_PKGS" bookworm "$w/rootfs" "$mirror" \
    > "$w/debootstrap.log" 2>&1 || { tail -20 "$w/debootstrap.log" >&2; exit 1; }
  # the slim image: kube-proxy and local-path-helper run on it (distroless-iptables upstream),
  # with an iptables wrapper that follows the node's backend (the wrapper is not kept for the node base)
  install -m 0755 "$here/iptables-wrapper" "$w/rootfs/usr/sbin/iptables-wrapper"
  wrapper_alts() {  # install|remove, as kubernetes-sigs/iptables-wrappers' installer registers it on Debian
    if [ "$1" = install ]; then
      chroot "$w/rootfs" update-alternatives --quiet --install /usr/sbin/iptables iptables /usr/sbin/iptables-wrapper 100 \
        --slave /usr/sbin/iptables-restore iptables-restore /usr/sbin/iptables-wrapper --slave /usr/sbin/iptables-save iptables-save /usr/sbin/iptables-wrapper
      chroot "$w/rootfs" update-alternatives --quiet --install /usr/sbin/ip6tables ip6tables /usr/sbin/iptables-wrapper 100 \
        --slave /usr/sbin/ip6tables-restore ip6tables-restore /usr/sbin/iptables-wrapper --slave /usr/sbin/ip6tables-save ip6tables-save /usr/sbin/iptables-wrapper
    else
      chroot "$w/rootfs" update-alternatives --quiet --remove iptables /usr/sbin/iptables-wrapper
      chroot "$w/rootfs" update-alternatives --quiet --remove ip6tables /usr/sbin/iptables-wrapper
      rm -f "$w/rootfs/usr/sbin/iptables-wrapper"
    fi
  }
  wrapper_alts install
  tar -C "$w/rootfs" --exclude='./var/cache/apt/archives/*.deb' --exclude='./var/lib/apt/lists/*' -c . \
    | podman import -q --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' - "$SLIM_IMAGE" >/dev/null
  wrapper_alts remove
  log "apt-get install in the chroot: ${BASE_PKGS[*]}"
  mount -t proc proc "$w/rootfs/proc"
  r=$w/rootfs
  echo 'exit 101' > "$r/usr/sbin/policy-rc.d"; chmod +x "$r/usr/sbin/policy-rc.d"   # start no service in the chroot
  chroot "$r" env DEBIAN_FRONTEND=noninteractive "${NICE[@]}" apt-get install -y -qq --no-install-recommends "${BASE_PKGS[@]}" \
    > "$w/apt.log" 2>&1 || { tail -30 "$w/apt.log" >&2; exit 1; }
  rm -f "$r/usr/sbin/policy-rc.d"
  # kind's images/base/Dockerfile, step by step (COPY --chmod ...)
  F=$KIND_SRC/images/base/files
  install -m 0755 "$F"/usr/local/bin/* "$r/usr/local/bin/"
  mkdir -p "$r/kind/bin" "$r/LICENSES" "$r/etc/containerd" "$r/etc/default" "$r/etc/sysctl.d" "$r/etc/systemd/system/kubelet.service.d"
  install -m 0644 "$F"/kind/README.txt "$r/kind/"; install -m 0755 "$F"/kind/bin/* "$r/kind/bin/"; chmod 755 "$r/kind" "$r/kind/bin"
  install -m 0644 "$F"/LICENSES/* "$r/LICENSES/"
  install -m 0644 "$F"/etc/crictl.yaml "$r/etc/"
  install -m 0644 "$F"/etc/containerd/* "$r/etc/containerd/"
  install -m 0644 "$F"/etc/default/* "$r/etc/default/"
  install -m 0644 "$F"/etc/sysctl.d/* "$r/etc/sysctl.d/"
  find "$F/etc/systemd/system" -maxdepth 1 -type f -exec install -m 0644 {} "$r/etc/systemd/system/" \;
  install -m 0644 "$F"/etc/systemd/system/kubelet.service.d/* "$r/etc/systemd/system/kubelet.service.d/"
  # kind installs containerd/ctr/shim in /usr/local/bin, runc in /usr/local/sbin, CNI plugins in /opt/cni/bin:
  # Debian's are in /usr/bin, /usr/sbin, /usr/lib/cni (containerd.service runs /usr/local/bin/containerd)
  for b in containerd ctr containerd-shim-runc-v2; do ln -sf "/usr/bin/$b" "$r/usr/local/bin/$b"; done
  # (containerd 1.6's CRI: bin_dir /opt/cni/bin, conf_dir /etc/cni/net.d; kind's config.toml keeps both defaults)
  mkdir -p "$r/opt/cni/bin"; for p in host-local loopback ptp portmap bridge; do ln -sf "/usr/lib/cni/$p" "$r/opt/cni/bin/$p"; done
  # the pod network instead of kindnetd: one static bridge config (single node, 10.246.0.0/24)
  install -D -m 0644 "$here/cni-bridge.conflist" "$r/etc/cni/net.d/10-tf-cluster-bridge.conflist"
  for p in $(jq -r '.plugins[].type' "$here/cni-bridge.conflist") loopback; do
    [ -x "$r/usr/lib/cni/$p" ] && [ -L "$r/opt/cni/bin/$p" ] || { log "CNI plugin $p missing from /opt/cni/bin"; exit 1; }
  done
  install -m 0755 "$CACHE/bin/crictl" "$r/usr/local/bin/crictl"
  # Deviation from kind: here even a --privileged container lacks CAP_SYS_RESOURCE, so runc cannot
  # lower oom_score_adj (kind's CRI config asks -998 for sandboxes: "failed to update
  # /proc/self/oom_score_adj: Permission denied"). kind turns restrict_oom_score_adj on only in a
  # user namespace; this turns it on whenever the capability is missing, before containerd starts.
  cat > "$r/kind/bin/restrict-oom-score-adj.sh" <<'SH'
#!/bin/sh
# containerd may only keep oom_score_adj >= its own when CAP_SYS_RESOURCE (bit 24) is missing
cap=$(awk '/^CapEff/ {print $2}' /proc/self/status)
if [ $(( (0x$cap >> 24) & 1 )) -eq 0 ]; then
  sed -i 's/restrict_oom_score_adj = false/restrict_oom_score_adj = true/' /etc/containerd/config.toml
fi
SH
  chmod 0755 "$r/kind/bin/restrict-oom-score-adj.sh"
  mkdir -p "$r/etc/systemd/system/containerd.service.d"
  printf '[Service]\nExecStartPre=/kind/bin/restrict-oom-score-adj.sh\n' > "$r/etc/systemd/system/containerd.service.d/10-restrict-oom-score-adj.conf"
  chroot "$r" sh -euc '
    find /lib/systemd/system/sysinit.target.wants/ -name "systemd-tmpfiles-setup.service" -delete
    rm -f /lib/systemd/system/multi-user.target.wants/* /etc/systemd/system/*.wants/* /lib/systemd/system/local-fs.target.wants/* \
          /lib/systemd/system/sockets.target.wants/*udev* /lib/systemd/system/sockets.target.wants/*initctl* /lib/systemd/system/basic.target.wants/*
    echo "ReadKMsg=no" >> /etc/systemd/journald.conf
    ln -sf /usr/lib/systemd/systemd /sbin/init
    systemctl enable kubelet.service containerd.service undo-mount-hacks.service
    systemctl mask systemd-binfmt.service
    mkdir -p /etc/kubernetes/manifests
    ctr oci spec | jq ".hooks.createContainer[.hooks.createContainer| length] |= . + {\"path\": \"/kind/bin/mount-product-files.sh\"}" \
      | jq "del(.process.rlimits)" > /etc/containerd/cri-base.json
    containerd --version; runc --version | head -1; crictl --version
    apt-get clean; rm -rf /var/lib/apt/lists/*' >&2
  umount "$r/proc"
  log "importing $BASE_IMAGE"
  tar -C "$r" -c . | podman import -q --change 'ENV container=docker' --change 'STOPSIGNAL SIGRTMIN+3' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' - "$BASE_IMAGE" >/dev/null
  cleanup; trap - EXIT
fi

# ---------------------------------------------------------------- 4. component images
# Each saved as a docker-archive (what kind's tarball layout and `ctr images import` read).
# The podman copies are removed after saving: the archives are the cached output.
IMG_TAG=$( { echo "$BASE_TAG"; sha256sum "$K8S_BIN"/kube-apiserver "$K8S_BIN"/kube-controller-manager "$K8S_BIN"/kube-scheduler \
  "$K8S_BIN"/kube-proxy "$K8S_BIN"/pause "$K8S_BIN"/local-path-provisioner "$CACHE"/bin/{crictl,etcd,coredns}; } | sha256sum | cut -c1-12)
IMGDIR=$CACHE/images/$IMG_TAG
archive_name() { echo "$IMGDIR/$(echo "$1" | tr '/:' '__').tar"; }
# mkimage REF FROM BINARY... -- ENTRYPOINT-JSON
mkimage() {
  local ref=$1 from=$2 entry=$3; shift 3
  local out; out=$(archive_name "$ref")
  [ -s "$out" ] && return 0
  local ctx=$CACHE/ctx/$(basename "$out" .tar); rm -rf "$ctx"; mkdir -p "$ctx"
  { echo "FROM $from"
    for b in "$@"; do ln "$b" "$ctx/$(basename "$b")" 2>/dev/null || cp "$b" "$ctx/"; echo "COPY --chmod=0755 $(basename "$b") /usr/local/bin/$(basename "$b")"; done
    if [ "$from" = scratch ]; then cp /etc/ssl/certs/ca-certificates.crt "$ctx/"; echo "COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt"; fi
    echo "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    if [ -n "$entry" ]; then echo "ENTRYPOINT $entry"; fi
  } > "$ctx/Containerfile"
  log "image $ref (FROM $from)"
  "${NICE[@]}" "${PODMAN[@]}" build --network none --pull=never -q -t "$ref" -f "$ctx/Containerfile" "$ctx" >/dev/null
  podman save -q --format docker-archive -o "$out.tmp" "$ref"
  mv "$out.tmp" "$out"
  podman rmi "$ref" >/dev/null
  rm -rf "$ctx"
}
step "component images -> $IMGDIR"
mkdir -p "$IMGDIR"
V=v$K8S_VERSION
mkimage registry.k8s.io/kube-apiserver:$V scratch '["/usr/local/bin/kube-apiserver"]' "$K8S_BIN/kube-apiserver"
mkimage registry.k8s.io/kube-controller-manager:$V scratch '["/usr/local/bin/kube-controller-manager"]' "$K8S_BIN/kube-controller-manager"
mkimage registry.k8s.io/kube-scheduler:$V scratch '["/usr/local/bin/kube-scheduler"]' "$K8S_BIN/kube-scheduler"
mkimage registry.k8s.io/kube-proxy:$V "$SLIM_IMAGE" '["/usr/local/bin/kube-proxy"]' "$K8S_BIN/kube-proxy"
mkimage "$ETCD_IMAGE" scratch '["/usr/local/bin/etcd"]' "$CACHE/bin/etcd"
mkimage "$COREDNS_IMAGE" scratch '["/usr/local/bin/coredns"]' "$CACHE/bin/coredns"
mkimage "$SANDBOX_IMAGE" scratch '["/usr/local/bin/pause"]' "$K8S_BIN/pause"
mkimage "$LPP_IMAGE" scratch '["/usr/local/bin/local-path-provisioner"]' "$K8S_BIN/local-path-provisioner"
mkimage "$LPH_IMAGE" "$SLIM_IMAGE" ''

# ---------------------------------------------------------------- 5. Kubernetes "server" tarball
TARBALL=$CACHE/kubernetes-server-$V-$IMG_TAG.tar.gz
step "server tarball $TARBALL"
if [ ! -s "$TARBALL" ]; then
  w=$(mktemp -d /var/tmp/kind-tarball.XXXXXX); d=$w/kubernetes/server/bin; mkdir -p "$d"
  echo "$V" > "$w/kubernetes/version"
  for b in kubeadm kubelet kubectl; do ln "$K8S_BIN/$b" "$d/$b" 2>/dev/null || cp "$K8S_BIN/$b" "$d/"; done
  for c in kube-apiserver kube-controller-manager kube-scheduler kube-proxy; do
    ln "$(archive_name "registry.k8s.io/$c:$V")" "$d/$c.tar"; echo "$V" > "$d/$c.docker_tag"
  done
  tar -C "$w" -c kubernetes | "${NICE[@]}" gzip -1 > "$TARBALL.tmp" && mv "$TARBALL.tmp" "$TARBALL"
  rm -rf "$w"
fi

# ---------------------------------------------------------------- 6. node image
NODE_TAG=$V-$( { echo "$BASE_TAG $IMG_TAG"; (cd "$here" && sha256sum docker-shim default-cni.yaml); } | sha256sum | cut -c1-12)
NODE_IMAGE=${NODE_IMAGE:-localhost/kind-node:$NODE_TAG}
step "node image $NODE_IMAGE"
if ! podman image exists "$NODE_IMAGE" || [ -n "${FORCE_NODE:-}" ]; then
  # kind's node-image builder drives the `docker` CLI: a shim maps it to rootful podman with
  # runc/cgroupfs, no network, and serves the images kind would pull from $IMGDIR; it skips kind's
  # pre-pull of kindnetd and writes our default-cni.yaml (a no-op ConfigMap) in place of kind's.
  mkdir -p "$CACHE/shim"; install -m 0755 "$here/docker-shim" "$CACHE/shim/docker"
  # kind leaves its extracted tarball (~1 GB) in TMPDIR: give it a private one and remove it
  old_id=$(podman image inspect --format '{{.Id}}' "$NODE_IMAGE" 2>/dev/null || true)
  ktmp=$(mktemp -d /var/tmp/kind-build.XXXXXX)
  PATH="$CACHE/shim:$PATH" KIND_SHIM_IMAGES="$IMGDIR" KIND_SHIM_SKIP="$KINDNETD_IMAGE" \
    KIND_SHIM_CNI_MANIFEST="$here/default-cni.yaml" TMPDIR=$ktmp \
    "${NICE[@]}" "$CACHE/kind" build node-image --type file "$TARBALL" --base-image "$BASE_IMAGE" --image "$NODE_IMAGE" \
    || { rm -rf "$ktmp"; exit 1; }
  rm -rf "$ktmp"
  [ -z "$old_id" ] || podman rmi "$old_id" >/dev/null 2>&1 || true   # the image FORCE_NODE replaced
  rm -f "$CACHE/checked-$NODE_TAG"
fi

# ---------------------------------------------------------------- 7. check
step "check: images in the node image's containerd store, CNI config"
want=$(for r in "registry.k8s.io/kube-apiserver:$V" "registry.k8s.io/kube-controller-manager:$V" "registry.k8s.io/kube-scheduler:$V" \
  "registry.k8s.io/kube-proxy:$V" "$ETCD_IMAGE" "$COREDNS_IMAGE" "$SANDBOX_IMAGE" "$LPP_IMAGE" "$LPH_IMAGE"; do echo "$r"; done | sort)
stamp=$CACHE/checked-$NODE_TAG
if [ ! -e "$stamp" ]; then
  # in the node image (its own network namespace: --network none): containerd's image store; the CRI
  # reporting NetworkReady with our conflist; the bridge plugin giving a test namespace an address
  # in 10.246.0.0/24 and a default route (then releasing it); default-cni.yaml being ours.
  check_sh='containerd >/dev/null 2>&1 & for i in $(seq 30); do ctr version >/dev/null 2>&1 && break; sleep 0.5; done
    ctr -n k8s.io images ls | awk "NR>1 && \$1 !~ /^sha256:/ {print \$1, (\$0 ~ /pinned/ ? \"pinned\" : \"UNPINNED\")}"
    echo "version $(cat /kind/version)"
    echo "default-cni $(sha256sum < /kind/manifests/default-cni.yaml | cut -c1-64)"
    conf=/etc/cni/net.d/10-tf-cluster-bridge.conflist
    for i in $(seq 20); do
      nr=$(crictl info 2>/dev/null | jq -r ".status.conditions[] | select(.type==\"NetworkReady\") | .status"); [ "$nr" = true ] && break; sleep 0.5
    done
    echo "cri-network-ready $nr"
    ip netns add cnicheck
    res=$(jq ".plugins[0] + {name: .name, cniVersion: .cniVersion}" $conf | CNI_COMMAND=ADD CNI_CONTAINERID=check CNI_NETNS=/run/netns/cnicheck \
      CNI_IFNAME=eth0 CNI_PATH=/opt/cni/bin /opt/cni/bin/bridge)
    echo "cni-add $(echo "$res" | jq -r ".ips[0].address") $(ip netns exec cnicheck ip -4 route show default | head -1 | tr " " _)"
    jq ".plugins[0] + {name: .name, cniVersion: .cniVersion}" $conf | CNI_COMMAND=DEL CNI_CONTAINERID=check CNI_NETNS=/run/netns/cnicheck \
      CNI_IFNAME=eth0 CNI_PATH=/opt/cni/bin /opt/cni/bin/bridge && echo "cni-del ok"
    echo "bridge-nf-call-iptables $(cat /proc/sys/net/bridge/bridge-nf-call-iptables 2>/dev/null || echo absent)"'
  have=$("${PODMAN[@]}" run --rm --network none --privileged --ulimit nofile=1024:1024 --ulimit nproc=4096:4096 --entrypoint bash "$NODE_IMAGE" -c "$check_sh")
  echo "$have" | sed 's/^/    /' >&2
  images=$(echo "$have" | awk '$2 == "pinned" || $2 == "UNPINNED" {print $1}' | grep -v '^import-' | sort)
  [ "$images" = "$want" ] || { log "node image store differs from the expected list:"; diff <(echo "$want") <(echo "$images") >&2; exit 1; }
  ! echo "$have" | grep -q UNPINNED || { log "unpinned images in the node image"; exit 1; }
  echo "$have" | grep -qx "version $V" || { log "wrong /kind/version"; exit 1; }
  echo "$have" | grep -qx "default-cni $(sha256sum < "$here/default-cni.yaml" | cut -c1-64)" || { log "/kind/manifests/default-cni.yaml is not ours"; exit 1; }
  echo "$have" | grep -qx "cri-network-ready true" || { log "containerd's CRI does not report NetworkReady with the static conflist"; exit 1; }
  echo "$have" | grep -qE '^cni-add 10\.246\.0\.[0-9]+/24 default_via_10\.246\.0\.1_' || { log "bridge plugin test failed"; exit 1; }
  echo "$have" | grep -qx "cni-del ok" || { log "bridge plugin DEL failed"; exit 1; }
  cfg=$(podman image inspect --format '{{json .Config.Entrypoint}} {{json .Config.Cmd}} {{json .Config.Env}} {{.Config.StopSignal}}' "$NODE_IMAGE")
  log "node image config: $cfg"
  case $cfg in '["/usr/local/bin/entrypoint","/sbin/init"] null '*) ;; *) log "unexpected entrypoint/cmd"; exit 1;; esac
  [[ $cfg != *'PROXY=\"'* ]] || { log "garbled proxy variables in the node image env"; exit 1; }
  touch "$stamp"
fi
step "prune this script's older outputs"
# only names this script makes (localhost/kind-{slim,base,node}); never tf-cluster* images
for ref in $(podman images --format '{{.Repository}}:{{.Tag}}' | grep -E '^localhost/kind-(slim|base|node):' || true); do
  case $ref in "$SLIM_IMAGE"|"$BASE_IMAGE"|"$NODE_IMAGE") ;; *) log "removing old $ref"; podman rmi "$ref" >/dev/null || true;; esac
done
# (and what the kindnetd build left: its binary and kube-network-policies source)
for f in "$CACHE"/images/* "$CACHE"/kubernetes-server-*.tar.gz "$CACHE"/checked-* "$CACHE"/bin/kindnetd "$CACHE"/src; do
  case $f in "$IMGDIR"|"$TARBALL"|"$stamp") ;; *) [ -e "$f" ] && { log "removing old $f"; rm -rf "$f"; };; esac
done
step "done"
log "node image: $NODE_IMAGE ($(podman image inspect --format '{{.Size}}' "$NODE_IMAGE" | awk '{printf "%.0f MB", $1/1e6}'))"
echo "$NODE_IMAGE"
