"""The node harness's process handling (hack/node/proc.py): a stopped component is gone once it is a
zombie. Its parent is PID 1 (the `up` that started it has exited), and a PID 1 that reaps orphans
late (this machine's takes 1-2 s) made each of `down`'s 25 stops wait for the reaping: 52 s."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hack"))
from node import proc  # noqa: E402


def test_a_running_process_has_not_exited_and_a_zombie_has():
    child = subprocess.Popen(["sleep", "60"])
    try:
        assert not proc.exited(child.pid)
        os.kill(child.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while not proc.exited(child.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        # not reaped yet (no wait() below until now): a zombie, which counts as exited
        state = Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        assert state == "Z"
        assert proc.exited(child.pid)
    finally:
        child.kill()
        child.wait()
    assert proc.exited(child.pid)  # reaped: no such process
