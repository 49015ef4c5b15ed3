#!/usr/bin/env bash
# Make sure an image builder is here: podman + buildah (and runc, debootstrap for the local
# base image) from Debian when neither docker (with a daemon) nor podman/buildah works.
# Idempotent; needs root only when something is missing.
set -euo pipefail
if command -v docker >/dev/null && docker info >/dev/null 2>&1; then exit 0; fi
pkgs=()
for c in podman buildah debootstrap runc; do command -v "$c" >/dev/null || pkgs+=("$c"); done
[ -x /usr/lib/cni/bridge ] || [ -x /usr/libexec/cni/bridge ] || pkgs+=(containernetworking-plugins)
[ ${#pkgs[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "[image] no image builder: install podman and buildah (sudo apt-get install ${pkgs[*]}) or docker" >&2; exit 1
fi
echo "[image] installing from Debian: ${pkgs[*]} uidmap fuse-overlayfs"
# one apt at a time (make check runs builds side by side; hack/node/build.sh takes the same lock)
exec 9>/run/lock/tf-cluster-apt.lock; flock 9
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${pkgs[@]}" uidmap fuse-overlayfs >/dev/null 2>&1 \
  || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${pkgs[@]}" uidmap fuse-overlayfs >/dev/null; }
