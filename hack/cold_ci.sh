#!/usr/bin/env bash
# A cold `.ci/run` as CI has it: a fresh clone of HEAD on this machine with every cache emptied
# first, timed, its log kept. DESTRUCTIVE for this machine's caches: it takes the e2e nodes down (their image stores purged),
# empties ~/.cache/tf-cluster, Go's module and build caches, pip's and npm's caches, podman's and
# containerd's image stores, apt's downloaded packages, and purges the Debian packages `make check` installs (the same lists
# as images/base/install-builder.sh and hack/node/build.sh), so that they are installed
# again as on a fresh machine. The breakdown is the timing table `make check` prints at its end.
#   hack/cold_ci.sh --yes [log]        (root; ~55-65 min on 2 cores)
set -euo pipefail
[ "${1:-}" = --yes ] || { sed -n 2,8p "$0" | sed 's/^# \{0,1\}//'; echo "usage: $0 --yes [log]"; exit 2; }
[ "$(id -u)" = 0 ] || { echo "run as root" >&2; exit 1; }
root=$(cd "$(dirname "$0")/.." && pwd)
log=${2:-/tmp/cold-ci-$(date +%Y%m%d-%H%M%S).log}
say() { echo "[cold-ci] $*"; }

say "taking the e2e node down (if up)"
if [ -x "$root/.venv/bin/python" ]; then "$root/.venv/bin/python" "$root/hack/node" down --purge >/dev/null 2>&1 || true; fi
say "emptying the caches"
go clean -cache -modcache 2>/dev/null || true
rm -rf "${XDG_CACHE_HOME:-$HOME/.cache}/tf-cluster" "${XDG_CACHE_HOME:-$HOME/.cache}/pip" "$HOME/.npm" "$HOME/go/pkg"
if command -v podman >/dev/null; then podman system reset -f >/dev/null 2>&1 || true; fi
if command -v ctr >/dev/null; then
  ctr -n k8s.io images ls -q 2>/dev/null | xargs -r ctr -n k8s.io images rm >/dev/null 2>&1 || true
fi
pkgs=(etcd-server prometheus podman buildah debootstrap runc containernetworking-plugins uidmap fuse-overlayfs containerd conntrack
      redis-server chromium chromium-driver fonts-dejavu-core clang-19 llvm-19 glusterfs-server glusterfs-client)
installed=(); for p in "${pkgs[@]}"; do dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q "ok installed" && installed+=("$p"); done
if [ ${#installed[@]} -gt 0 ]; then
  say "purging Debian packages make check installs: ${installed[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq "${installed[@]}" >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get autoremove -y -qq >/dev/null
fi
rm -rf /var/lib/containerd /var/lib/containers
apt-get clean  # the downloaded .debs too: a fresh machine fetches every package again

work=$(mktemp -d)
git clone -q "$root" "$work/p"
say "fresh clone of $(git -C "$work/p" log --oneline -1) in $work/p; log: $log"
start=$(date +%s)
(cd "$work/p" && bash .ci/run; echo $? > "$work/rc") 2>&1 | python3 -u -c '
import sys, time
t0 = time.time()
for line in sys.stdin:
    sys.stdout.write(f"{time.time() - t0:7.1f} {line}")
' > "$log"
rc=$(cat "$work/rc" 2>/dev/null || echo 1)
secs=$(( $(date +%s) - start ))
sed -n '/\[timing\] where/,$p' "$log"
say "exit $rc after ${secs} s ($((secs / 60)) min $((secs % 60)) s); full log: $log"
exit "$rc"
