"""Run a command as the leader of a session of its own, and leave none of that session behind.

    python reaped.py COMMAND [ARG...]

`make bench-sim` runs bench_sim.py so. A sitting starts clusters (etcd, kube-apiserver, kwok,
CoreDNS) and hundreds of launchers from threads; bench_sim.py takes down the ones it knows of when it
ends, but a part whose cluster was still starting when a SIGTERM came was not yet known: in a smoke
sitting stopped so, one part's cluster and its 32 launchers and agents outlived it; and what a
launcher's program starts outlives the launcher (a launcher SIGKILLed as its node is lost; the
"before" launcher, which signals its child's pid alone: dash's `sh -c "sleep ..."` is two
processes). What the kernel knows, the session, leaves no such gap: a launcher puts its program in
a process group of its own (so the process group would not do), but nothing on a sitting's path
starts a session. SIGTERM, SIGINT and SIGHUP sent to this process are passed to the command; once
it has exited, what is left of its session is sent SIGTERM, then SIGKILL after GRACE seconds. The
exit code is the command's (128 + the signal's number if a signal ended it).
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


def members(session: int) -> list[int]:
    """The live processes of session `session` (from /proc: field 6 of each stat is its session)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) ": state, ppid, pgrp, session, ...
        if int(fields[3]) == session and fields[0] != "Z":
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


def reap(session: int, grace: float = GRACE) -> int:
    """Stop every process left in `session` (whatever its process group): SIGTERM, then SIGKILL
    after `grace` s. How many there were."""
    left = members(session)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in members(session):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while members(session) and time.monotonic() < deadline:
            time.sleep(0.2)
        if not members(session):
            break
    return len(left)


def main(argv: list[str]) -> int:
    if not argv:
        sys.exit("usage: reaped.py COMMAND [ARG...]")
    proc = subprocess.Popen(argv, start_new_session=True)  # its session's id is its pid

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
