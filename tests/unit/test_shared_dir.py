"""The example trainers' shared_dir (charts/tf-cluster/files/trainers/common.py): a directory that
several tasks make at once on a network filesystem is settled before TensorFlow writes in it.
GlusterFS's brick makes a directory as root and gives it to its owner after; another node's client
that looked in between refuses the owner's mkdir in it for up to a second (measured: MultiWorkerMirrored
tasks on three nodes, `PermissionDeniedError: .../checkpoints/backup/workertemp_0`, a counted failure at
the start). Here the same sequence with the kernel's own checks: a directory owned by root, given to
the task's user a moment later, while the task (another uid) waits in shared_dir."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

TRAINERS = Path(__file__).resolve().parents[2] / "charts" / "tf-cluster" / "files" / "trainers"
TASK_UID = 65534  # nobody: a task's non-root user

if os.getuid() != 0 and not os.environ.get("CI"):
    pytest.skip("makes directories owned by root and another uid: run as root (CI does)", allow_module_level=True)


def as_task(path: Path, settle: float) -> subprocess.Popen:
    """shared_dir(path) in a process of the task's uid."""
    code = f"import common, sys; common.shared_dir({str(path)!r}, settle={settle}); print('settled')"
    return subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=TRAINERS,
        env={**os.environ, "PYTHONPATH": str(TRAINERS), "PYTHONDONTWRITEBYTECODE": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        user=TASK_UID,
    )


@pytest.fixture
def volume():
    """A directory every uid may enter (pytest's tmp_path is root's alone), as a claim's root is."""
    root = Path(tempfile.mkdtemp(prefix="shared-dir-"))
    root.chmod(0o777)
    yield root
    subprocess.run(["rm", "-rf", str(root)], check=True)


def test_a_directory_given_to_the_task_a_moment_after_it_was_made_is_waited_for(volume):
    backup = volume / "checkpoints" / "backup"
    backup.mkdir(parents=True, mode=0o755)  # made by root, not yet given to its owner
    os.chown(volume / "checkpoints", TASK_UID, TASK_UID)
    task = as_task(backup, settle=20)
    time.sleep(1.5)
    assert task.poll() is None, f"shared_dir returned while the directory was root's: {task.communicate()}"
    os.chown(backup, TASK_UID, TASK_UID)  # the brick gives it to its owner
    out, err = task.communicate(timeout=30)
    assert task.returncode == 0, err
    assert out.strip() == "settled"
    assert list(backup.iterdir()) == [], "the probe it made is removed"


def test_a_directory_the_task_can_never_write_fails_with_its_owner_and_what_to_set(volume):
    locked = volume / "locked"
    locked.mkdir(mode=0o755)
    t0 = time.monotonic()
    task = as_task(locked / "backup", settle=2)
    _, err = task.communicate(timeout=30)
    assert task.returncode != 0
    assert time.monotonic() - t0 >= 2, "it waited the settle time first"
    assert f"as uid {TASK_UID}" in err and "podSecurityContext.fsGroup" in err, err
    assert f"cannot create entries in {locked / 'backup'}" in err, err
    assert f"{locked} is owned by uid 0 gid 0, mode 755" in err, err


def test_a_writable_directory_is_made_at_once(volume):
    os.chown(volume, TASK_UID, TASK_UID)
    t0 = time.monotonic()
    task = as_task(volume / "a" / "b", settle=20)
    out, err = task.communicate(timeout=30)
    assert task.returncode == 0, err
    assert time.monotonic() - t0 < 10
    assert (volume / "a" / "b").is_dir() and list((volume / "a" / "b").iterdir()) == []
