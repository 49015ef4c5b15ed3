"""Run a command as the leader of a process group of its own, and leave none of that group behind.

    python reaped.py COMMAND [ARG...]

`make bench-sim` runs bench_sim.py so. A sitting starts clusters (etcd, kube-apiserver, kwok,
CoreDNS) and hundreds of launchers from threads; bench_sim.py takes down the ones it knows of when it
ends, but a part whose cluster was still starting when a SIGTERM came was not yet known: in a smoke
sitting stopped so, one part's cluster and its 32 launchers and agents outlived it. What the kernel
knows, the process group, leaves no such gap. SIGTERM, SIGINT and SIGHUP sent to this process are
passed to the command; once it has exited, what is left of its group is sent SIGTERM, then SIGKILL
after GRACE seconds. The exit code is the command's (128 + the signal's number if a signal ended it).
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

GRACE = 10.0


def members(group: int) -> list[int]:
    """The live processes of process group `group` (from /proc: field 5 of each stat is its group)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) ": state, ppid, pgrp, ...
        if int(fields[2]) == group and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def names(pids: list[int]) -> str:
    """What `pids` are, counted by command name: "32 sleep, 2 kwok"."""
    counts: dict[str, int] = {}
    for pid in pids:
        try:
            name = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            name = "(gone)"
        counts[name] = counts.get(name, 0) + 1
    return ", ".join(f"{n} {name}" for name, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def reap(group: int, grace: float = GRACE) -> int:
    """Stop every process left in `group`: SIGTERM, then SIGKILL after `grace` s. How many there were."""
    left = members(group)
    if not left:
        return 0
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(group, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + grace
        while members(group) and time.monotonic() < deadline:
            time.sleep(0.2)
        if not members(group):
            break
    return len(left)


def main(argv: list[str]) -> int:
    if not argv:
        sys.exit("usage: reaped.py COMMAND [ARG...]")
    proc = subprocess.Popen(argv, start_new_session=True)  # its group's id is its pid

    def forward(sig: int, _frame: object) -> None:
        try:
            os.kill(proc.pid, sig)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    rc = proc.wait()
    what = names(members(proc.pid))  # read before they are stopped
    left = reap(proc.pid)
    if left:
        print(
            f"[reaped] {left} process(es) left behind by {shlex.join(argv)} ({what}): stopped",
            file=sys.stderr,
            flush=True,
        )
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
