#!/usr/bin/env bash
# Print the Debian archive this machine's apt is configured with for SUITE (default bookworm), so that
# a build fetches from the user's mirror, never from a host written here. DEBIAN_MIRROR wins if set.
#   images/base/debian-mirror.sh [suite]
set -euo pipefail
suite=${1:-bookworm}
if [ -n "${DEBIAN_MIRROR:-}" ]; then echo "$DEBIAN_MIRROR"; exit 0; fi
uri=""
if command -v apt-get >/dev/null; then
  uri=$(apt-get indextargets --no-release-info --format '$(REPO_URI)' "Release: $suite" 'Identifier: Packages' 2>/dev/null | head -1)
fi
if [ -z "$uri" ]; then
  echo "[base] apt on this machine has no source for Debian $suite (or no apt):" \
    "set DEBIAN_MIRROR to the Debian archive to fetch from" >&2
  exit 1
fi
echo "${uri%/}"
