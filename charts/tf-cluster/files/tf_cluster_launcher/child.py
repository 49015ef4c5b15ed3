"""The child process: started with its output piped (or not), pumped to the launcher's own, stopped
with a grace."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from typing import TYPE_CHECKING

from .common import OUTPUT, log
from .progress import Lines

if TYPE_CHECKING:
    from .metrics import Metrics


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


def start_child(argv: list[str], metrics: Metrics | None) -> tuple[subprocess.Popen[bytes], list[threading.Thread]]:
    """The child process and, with `metrics`, the threads that pump its piped stdout and stderr."""
    if metrics is None:
        return subprocess.Popen(argv), []
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    pumps: list[threading.Thread] = []
    for pipe, fd in ((proc.stdout, 1), (proc.stderr, 2)):
        # Popen gives a pipe for stdout=PIPE, stderr=PIPE: never None here
        pumps.append(threading.Thread(target=pump, args=(pipe.fileno(), fd, Lines(metrics.read_line)), daemon=True))  # type: ignore[union-attr]
        pumps[-1].start()
    metrics.set_state("training")
    return proc, pumps


def stop_child(proc: subprocess.Popen[bytes], grace: float) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        log("child still running %ss after SIGTERM; killing it" % grace)
        proc.kill()
        proc.wait()
