"""Components `up` leaves for later (TF_CLUSTER_NODE_DEFER="kwok", or "argocd kwok"): built, and
Argo CD started, beside the first scenarios instead of before the node comes up.

In `make check` (tooling/check.sh) the node's builds and `make test` keep both cores busy until
the node comes up; the scenarios afterwards leave some idle (check.sh logs the idle share by
minute: ~12 % during the two lanes, ~65 % in the scenarios that run alone). kwok is first used
after the lanes (test_scale.py): deferred, it is built at nice 10 in that idle time, and
test_scale.py waits for the build (wait()), failing with its log if it failed. Argo CD can be
deferred too, but `make check` does not: deferred with kwok on this machine, the two took 322 s
of both cores, more than the lanes leave idle before test_argocd.py (~900 s into lane 2).

Without TF_CLUSTER_NODE_DEFER (`make e2e`, a developer's `up`) nothing is deferred.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from .config import HERE, logs, run
from .proc import NodeError, pid_of, say

DEFERRABLE = ("argocd", "kwok")
STATUS = run / "deferred.status"  # "running", "ok", or "failed: why"
NAMES = run / "deferred.components"  # what is deferred, space separated
PID = run / "deferred.pid"  # proc.pid_of("deferred") reads it, as every pid file of the harness
LOG = logs / "deferred.log"


def components() -> tuple[str, ...]:
    """What this environment defers (TF_CLUSTER_NODE_DEFER), checked against what can be."""
    names = tuple(os.environ.get("TF_CLUSTER_NODE_DEFER", "").split())
    unknown = [n for n in names if n not in DEFERRABLE]
    if unknown:
        raise NodeError(f"TF_CLUSTER_NODE_DEFER names {unknown}: only {' '.join(DEFERRABLE)} can be built after `up`")
    return names


def start_later() -> None:
    """At the end of `up`: the deferred builds (and Argo CD's start) in a process of their own."""
    names = components()
    if not names:
        return
    running = pid_of(PID.stem)
    if running:  # a second `up` while the first one's build runs: that build goes on, no second one
        say(f"the deferred build of {NAMES.read_text().strip()} already runs (pid {running}, log {LOG})")
        return
    for d in (run, logs):
        d.mkdir(parents=True, exist_ok=True)
    NAMES.write_text(" ".join(names))
    STATUS.write_text("running")
    with LOG.open("a") as log:
        p = subprocess.Popen(
            ["nice", "-n", "10", sys.executable, str(HERE), "deferred"],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    PID.write_text(str(p.pid))
    say(f"building {' and '.join(names)} beside the scenarios (nice 10, log {LOG}); what needs them waits")


def stop() -> None:
    """At `down`: a deferred build still running is stopped (its whole process group)."""
    pid = pid_of(PID.stem)  # None once it ended, or when its number is another process's now
    if pid:
        os.killpg(pid, signal.SIGTERM)
        say(f"stopped the deferred build (pid {pid})")
    PID.unlink(missing_ok=True)


def wait(component: str, timeout: float = 1800) -> str | None:
    """For a scenario that needs `component`: wait while the deferred build runs. None once it is
    there (or it was never deferred), else why it is not."""
    if not STATUS.exists() or component not in (NAMES.read_text().split() if NAMES.exists() else ()):
        return None
    t0, said = time.monotonic(), time.monotonic()
    while (status := STATUS.read_text().strip()) == "running":
        if not pid_of(PID.stem):
            return f"the deferred build of {component} ended without saying how (its log: {LOG})"
        if time.monotonic() - t0 > timeout:
            return f"the deferred build of {component} still runs after {timeout:.0f}s (its log: {LOG})"
        if time.monotonic() - said >= 60:
            print(f"[deferred] waiting {time.monotonic() - t0:.0f}s for the build of {component} ...", flush=True)
            said = time.monotonic()
        time.sleep(2)
    if time.monotonic() - t0 > 1:
        print(f"[deferred] {component} ready after waiting {time.monotonic() - t0:.0f}s", flush=True)
    if status == "ok":
        return None
    tail = "\n".join(LOG.read_text(errors="replace").splitlines()[-20:]) if LOG.exists() else "(no log)"
    return f"the deferred build of {component} {status}; the end of {LOG}:\n{tail}"


def build_and_start(args) -> int:
    """The `deferred` verb (start_later runs it): build what is deferred, then start Argo CD."""
    from .argocd import up_argocd
    from .cli import build

    names = components()
    t0 = time.monotonic()
    try:
        build(args, names)
        if "argocd" in names:
            os.setpriority(os.PRIO_PROCESS, 0, 0)  # Argo CD itself runs at the usual priority
            up_argocd()
    except BaseException as e:
        STATUS.write_text(f"failed: {e}")
        raise
    STATUS.write_text("ok")
    say(f"deferred {' and '.join(names)} ready after {time.monotonic() - t0:.0f}s")
    return 0
