"""The harness coming back over what a killed run leaves behind. A machine stopped in the middle of
`make e2e` (a CI job's timeout, an OOM kill, a snapshot of a running sandbox restored) keeps the
node's state on disk and its FUSE mount of the shared volume in the mount table, with no client
behind it: every stat of the shared path fails (ENOTCONN). `hack/node up` failed there once
(`FileExistsError: .../local-path` from the mkdir before the stale mount was removed), failing a CI
run at its `node-up` phase; it must take the dead mount away and mount the volume again."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from test_cluster import KUBECONFIG

HACK = Path(__file__).resolve().parents[3] / "hack"
sys.path.insert(0, str(HACK))
from node import config as node_config  # noqa: E402
from node import storage  # noqa: E402
from node.proc import pid_of  # noqa: E402

pytestmark = pytest.mark.needs(
    "the harness's node",
    node_config.is_this_node(KUBECONFIG),
    "it kills the host's storage client of the node `make e2e` brings up",
)


def test_up_mounts_the_volume_again_over_a_dead_clients_mount():
    client = pid_of("glusterfs")
    assert client, "the host's GlusterFS client is not running: is the node up?"
    os.kill(client, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while pid_of("glusterfs") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not pid_of("glusterfs"), f"the client (pid {client}) outlived SIGKILL by 30 s"
    with pytest.raises(OSError) as stale:
        os.stat(node_config.SHARED)
    # the first stat after the kill reads ECONNABORTED, the next ones ENOTCONN
    assert stale.value.errno in (errno.ECONNABORTED, errno.ENOTCONN), f"not a dead client's mount: {stale.value!r}"

    t0 = time.monotonic()
    up = subprocess.run([sys.executable, str(HACK / "node"), "up"], capture_output=True, text=True, timeout=600)
    took = time.monotonic() - t0
    assert up.returncode == 0, f"`node up` over the dead mount failed:\n{up.stdout[-3000:]}\n{up.stderr[-3000:]}"
    assert storage.mounted(pid_of("glusterfs") or 0), "`up` succeeded but the volume is not mounted on this host"
    # the same volume the other nodes' clients serve: written here, read through another node's client
    probe = node_config.SHARED / f"recovery-{uuid.uuid4().hex[:8]}"
    probe.write_text("written on the host after the remount\n")
    try:
        for node in node_config.EXTRA_NODES:
            seen = subprocess.run(
                ["nsenter", f"--mount={node.mntns}", "--", "cat", str(probe)], capture_output=True, text=True
            )
            assert seen.stdout == probe.read_text(), f"{node.name} does not see the host's write: {seen.stderr}"
    finally:
        probe.unlink()
    print(f"`node up` over a dead client's mount: {took:.1f}s")
