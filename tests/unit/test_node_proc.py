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


def test_the_mount_table_lists_each_point_and_type_in_the_kernels_order_with_escapes_decoded():
    text = "\n".join(
        [
            "27 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw",
            "40 27 0:40 / /var/lib/x rw,relatime - tmpfs tmpfs rw",
            "41 40 0:41 / /var/lib/x rw,relatime - fuse.glusterfs 10.245.0.1:vol rw",  # over the tmpfs
            r"42 27 0:42 / /mnt/a\040b rw - nfs4 srv:/e rw",  # a space in the point, as the kernel writes it
            "garbage",
        ]
    )
    assert proc.mount_table(text) == [
        ("/", "ext4"),
        ("/var/lib/x", "tmpfs"),
        ("/var/lib/x", "fuse.glusterfs"),
        ("/mnt/a b", "nfs4"),
    ]
    assert ("/proc", "proc") in proc.mount_table()  # this process's own table when given none
