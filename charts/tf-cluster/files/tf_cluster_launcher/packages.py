"""The `packages` init container (the chart's `packages` values): the modules a pod's programs
need that its image lacks, installed by the image's own pip into the pod's packages directory
(on the containers' PYTHONPATH). TensorFlow's official image has TensorFlow alone; an image built
by `tf-cluster build` has everything, and this installs nothing.

    python3 launcher.py --packages TARGET MODULE=REQUIREMENT [...]
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import time

# A failed install counts as the pod's failure (retried under backoffLimitPerIndex): an index
# that is down for a moment is worth a retry.
PIP_FAILED = 1
USAGE = 2
MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def missing(pairs: list[str]) -> list[str]:
    """The requirements whose module this Python cannot import (`module=requirement` pairs)."""
    out = []
    for pair in pairs:
        module, sep, requirement = pair.partition("=")
        if not sep or not MODULE.match(module) or not requirement:
            raise ValueError("%r is not MODULE=REQUIREMENT" % pair)
        if importlib.util.find_spec(module) is None:
            out.append(requirement)
    return out


def install(target: str, pairs: list[str]) -> int:
    try:
        wanted = missing(pairs)
    except ValueError as e:
        print("packages: %s" % e, flush=True)
        return USAGE
    if not wanted:
        print("packages: the image has every one (%s): nothing to install" % ", ".join(pairs), flush=True)
        return 0
    print("packages: the image lacks %s: installing with its pip into %s ..." % (" ".join(wanted), target), flush=True)
    t0 = time.monotonic()
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-input", "--target", target] + wanted
    rc = subprocess.call(cmd)
    if rc != 0:
        print(
            "packages: pip exited %d installing %s. The pod needs a package index: point pip at your mirror "
            "with the chart's packages.pipEnv (PIP_INDEX_URL), or use an image that has them "
            "(`tf-cluster build`) and set packages.enabled=false." % (rc, " ".join(wanted)),
            flush=True,
        )
        return PIP_FAILED
    print("packages: installed %s in %.1fs" % (" ".join(wanted), time.monotonic() - t0), flush=True)
    return 0


def main(args: list[str]) -> int:
    if not args:
        print("usage: launcher.py --packages TARGET MODULE=REQUIREMENT [...]", flush=True)
        return USAGE
    return install(args[0], args[1:])
