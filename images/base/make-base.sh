#!/usr/bin/env bash
# Make the base image locally when no registry can be reached: a minimal Debian
# bookworm root filesystem (python3.11, venv, CA certificates) from Debian's own
# packages, imported into the image store of podman/buildah/docker.
#   images/base/make-base.sh [builder] [image-name]
set -euo pipefail
builder=${1:-podman}
name=${2:-localhost/tf-cluster-base:bookworm}
if "$builder" image exists "$name" 2>/dev/null; then echo "[base] $name already present"; exit 0; fi
command -v debootstrap >/dev/null || { echo "[base] debootstrap missing: apt-get install debootstrap" >&2; exit 1; }
mirror=$(bash "$(dirname "$0")/debian-mirror.sh" bookworm)  # the machine's apt source, or DEBIAN_MIRROR
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "[base] debootstrap bookworm (minbase + python3) from $mirror into $work ..."
debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$work/rootfs" "$mirror" \
  > "$work/debootstrap.log" 2>&1 || { tail -20 "$work/debootstrap.log" >&2; exit 1; }
rm -rf "$work"/rootfs/var/cache/apt/archives/*.deb "$work"/rootfs/var/lib/apt/lists/*
echo "[base] importing as $name"
tar -C "$work/rootfs" -c . | "$builder" import --change 'CMD ["/bin/bash"]' - "$name" >/dev/null
echo "[base] $name ready"
