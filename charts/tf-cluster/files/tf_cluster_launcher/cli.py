"""The launcher's command line: a task (`-- <command> [args...]`), the agent (`--agent`, the
pod's tf-cluster-agent sidecar), `--check` (`helm test`: the run's state, checked once), or
`--packages` (the `packages` init container: what the image lacks, packages.py)."""

from __future__ import annotations

import urllib.error

from . import packages
from .agent import Agent
from .common import ABANDONED, ConfigError, env
from .leader import leader_condition, leader_name
from .task import run
from .tfconfig import peer_hosts, wait_for_peers


def check() -> int:
    """`helm test`: the leading Job must not have failed; while it runs, peers must resolve."""
    job = env("TF_CLUSTER_LEADER_JOB")
    what = leader_name()
    try:
        cond = leader_condition()
    except (ConfigError, urllib.error.URLError, OSError, ValueError) as e:
        print("FAIL: cannot read %s: %s" % (what, e))
        return 1
    if cond == "Failed":
        print("FAIL: Job %s failed; see kubectl describe job %s" % (job, job))
        return 1
    if cond == ABANDONED:
        print("FAIL: %s stopped renewing its heartbeat; its servers stop (see the notebook's kernel)" % what)
        return 1
    if cond == "Complete":
        print("OK: %s completed" % what)
        return 0
    missing = wait_for_peers(peer_hosts(env("TF_CONFIG")), float(env("TF_CLUSTER_PEER_TIMEOUT", "60")))
    if missing:
        print("FAIL: %s is running but these tasks do not resolve: %s" % (what, ", ".join(missing)))
        return 1
    print("OK: %s is running and every task resolves" % what)
    return 0


def main(args: list[str]) -> int:
    if args[:1] == ["--agent"]:
        return Agent().run()
    if args[:1] == ["--check"]:
        return check()
    if args[:1] == ["--packages"]:
        return packages.main(args[1:])
    if args[:1] == ["--"]:
        args = args[1:]
    return run(args)
