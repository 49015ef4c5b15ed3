"""The child process: started with its output piped (or not) in a process group of its own, pumped to
the launcher's own, stopped with a grace. A signal goes to the whole group and the task waits for all
of it: a command wrapped in a shell (`sh -c "cd /code && python train.py"`, which dash and bash run as
the shell's child) is the shell's child, and only the group reaches it. As dumb-init's default does:
so the command's first process leads its group and cannot start a session of its own (util-linux
`setsid` then forks and exits 0 at once: the task would end there), and a wrapper that forwards
signals itself makes its children get them twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from .common import OUTPUT, log
from .progress import Lines

if TYPE_CHECKING:
    from .metrics import Metrics


# the child's own process group (its id: the child's pid), in the launcher's session: where a pod has
# no PID namespace of its own (run-local) the session is the pod's every process. (Python 3.11's
# process_group; before it, setpgrp in the forked child)
OWN_GROUP: dict[str, Any] = {"process_group": 0} if sys.version_info >= (3, 11) else {"preexec_fn": os.setpgrp}


def write_all(fd: int, data: bytes) -> bool:
    """Write all of `data` to `fd`; False once it cannot (a closed stdout: the rest is dropped)."""
    while data:
        try:
            n = os.write(fd, data)
        except OSError:
            return False
        data = data[n:]
    return True


def pump(source: int, fd: int, lines: Lines) -> None:
    """Copy the child's output (`source`, a pipe) to ours (`fd`) as it comes, and read its lines."""
    copying = True
    while True:
        try:
            data = os.read(source, 65536)
        except OSError:
            data = b""
        if not data:
            break
        if copying:
            with OUTPUT:
                copying = write_all(fd, data)
        lines.feed(data)
    lines.feed(b"", final=True)


def become_subreaper() -> None:
    """Outside a container (run-local, tests) the launcher is not PID 1: made a child subreaper
    (Linux 3.4+), it still inherits what the command's processes leave when their parent ends, so
    it reaps them (group_left), and a zombie nobody reaps never counts as a process still running."""
    if os.getpid() == 1:
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: orphans go to init, which reaps them
        pass


PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h


def start_child(argv: list[str], metrics: Metrics | None) -> tuple[subprocess.Popen[bytes], list[threading.Thread]]:
    """The child process and, with `metrics`, the threads that pump its piped stdout and stderr."""
    become_subreaper()
    if metrics is None:
        return subprocess.Popen(argv, **OWN_GROUP), []
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **OWN_GROUP)
    pumps: list[threading.Thread] = []
    for pipe, fd in ((proc.stdout, 1), (proc.stderr, 2)):
        # Popen gives a pipe for stdout=PIPE, stderr=PIPE: never None here
        pumps.append(threading.Thread(target=pump, args=(pipe.fileno(), fd, Lines(metrics.read_line)), daemon=True))  # type: ignore[union-attr]
        pumps[-1].start()
    metrics.set_state("training")
    return proc, pumps


SIGNALLED: set[int] = set()  # the process groups signal_group has signalled


def signal_group(proc: subprocess.Popen[bytes], signum: int) -> bool:
    """Send `signum` to the child's process group; False when no process of it is left."""
    SIGNALLED.add(proc.pid)
    try:
        os.killpg(proc.pid, signum)
    except ProcessLookupError:
        return False
    except PermissionError:  # only processes of another user are left (setuid): none to signal
        log("the command's process group holds only processes this user may not signal (setuid)")
        return False
    return True


def group_left(proc: subprocess.Popen[bytes]) -> bool:
    """Whether a process of the child's group still runs once the child itself has been reaped: one
    it left behind. As the container's PID 1 the launcher inherits those whose parent ended, so it
    reaps those that ended first (a zombie is still in its group)."""
    while True:
        try:
            pid, _ = os.waitpid(-proc.pid, os.WNOHANG)
        except ChildProcessError:  # none of the group is our child
            break
        if pid == 0:
            break
    try:
        os.killpg(proc.pid, 0)
    except (ProcessLookupError, PermissionError):  # none left, or none this user can signal or wait for
        return False
    return True


def wait_for_group(proc: subprocess.Popen[bytes], until: float) -> bool:
    """Wait (until the monotonic time `until`) for the processes the child left in its group to end;
    whether any still runs then."""
    while group_left(proc):
        if time.monotonic() >= until:
            return True
        time.sleep(0.1)
    return False


def end_group(proc: subprocess.Popen[bytes], grace: float) -> None:
    """The child has exited: what it left in its group gets SIGTERM (unless the group was signalled
    already: that signal's grace runs) and `grace` seconds, then SIGKILL. A process
    that runs on in the background of a command that ended would die with the container anyway: here
    it has its grace, and outside a container (run-local) it does not outlive the task."""
    if not group_left(proc):
        return
    if proc.pid not in SIGNALLED:
        log("stopping what the command left running in its process group (SIGTERM, then SIGKILL after %ss)" % grace)
        signal_group(proc, signal.SIGTERM)
    if wait_for_group(proc, time.monotonic() + grace):
        log("the command's process group still runs %ss after SIGTERM; killing it" % grace)
        signal_group(proc, signal.SIGKILL)
        wait_for_group(proc, time.monotonic() + 5)


def stop_child(proc: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM to the child's group; SIGKILL to it when the child, or a process of its group, still
    runs `grace` seconds later. (A child that exited already may have left processes: the task's
    end_group stops them.)"""
    if proc.poll() is not None:
        return
    signal_group(proc, signal.SIGTERM)
    deadline = time.monotonic() + grace
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        pass
    if proc.poll() is None or wait_for_group(proc, deadline):
        log("the command still runs %ss after SIGTERM; killing its process group" % grace)
        signal_group(proc, signal.SIGKILL)
        proc.wait()
