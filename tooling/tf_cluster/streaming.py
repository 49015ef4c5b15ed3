"""Long commands (image builds, pip) shown as they go: the lines that say where they are, with
the elapsed time, and the last lines kept for the error message if they fail."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable


def run_streaming(
    argv: list[str], shows: Callable[[str], bool], say: Callable[[str], None], label: str, keep: int = 30
) -> tuple[int, list[str], float]:
    """Run `argv` (stderr into stdout); `say` each line `shows` accepts as `[label  12.3s] line`.
    Returns (exit code, the last `keep` lines, seconds)."""
    start = time.monotonic()
    tail: list[str] = []
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1) as proc:
        assert proc.stdout is not None  # stdout=PIPE
        for line in proc.stdout:
            line = line.rstrip()
            tail = (tail + [line])[-keep:]
            if shows(line):
                say(f"[{label} {time.monotonic() - start:6.1f}s] {line}")
    return proc.returncode, tail, time.monotonic() - start
