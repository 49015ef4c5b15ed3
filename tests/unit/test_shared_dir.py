"""The example trainers' shared_dir (charts/tf-cluster/files/trainers/common.py): a directory that
several tasks make at once on a network filesystem is settled before TensorFlow writes in it.
GlusterFS's brick makes a directory as root and gives it to its owner after; another node's client
that looked in between refuses the owner's mkdir in it for up to a second (measured: MultiWorkerMirrored
tasks on three nodes, `PermissionDeniedError: .../checkpoints/backup/workertemp_0`, a counted failure at
the start). Here the same sequence with the kernel's own checks: a directory owned by root, given to
the task's user a moment later, while the task (another uid) waits in shared_dir."""

from __future__ import annotations

import importlib.util
import multiprocessing
import os
import subprocess
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path

import pytest

COMMON = Path(__file__).resolve().parents[2] / "charts" / "tf-cluster" / "files" / "trainers" / "common.py"
TASK_UID = 65534  # nobody: a task's non-root user

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another uid; run as root to cover it")


def trainers_common():
    spec = importlib.util.spec_from_file_location("trainers_common_shared_dir", COMMON)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def as_task(path: Path, settle: float) -> tuple[multiprocessing.Process, Connection]:
    """shared_dir(path) in a forked process that dropped to the task's uid (the module loaded
    before, as root: the checkout may sit where that uid cannot read, e.g. `mktemp -d`'s 0700). It
    sends "settled" or the error's text, and exits 0 only once settled."""
    common = trainers_common()
    said, tell = multiprocessing.Pipe(duplex=False)

    def task() -> None:
        os.setgroups([])
        os.setgid(TASK_UID)
        os.setuid(TASK_UID)
        try:
            common.shared_dir(str(path), settle=settle)
        except BaseException as e:  # noqa: BLE001 - the test reads what it says
            tell.send(str(e))
            raise SystemExit(1) from e
        tell.send("settled")

    proc = multiprocessing.get_context("fork").Process(
        target=task, daemon=True
    )  # a failed test does not wait for it at exit
    proc.start()
    return proc, said


def outcome(proc: multiprocessing.Process, said: Connection, timeout: float) -> str:
    """What the task said, once it ended within `timeout`."""
    proc.join(timeout)
    assert proc.exitcode is not None, f"shared_dir still running after {timeout}s"
    return said.recv()


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
    task, said = as_task(backup, settle=20)
    time.sleep(1.5)
    assert task.is_alive(), f"shared_dir returned while the directory was root's: {outcome(task, said, 5)}"
    os.chown(backup, TASK_UID, TASK_UID)  # the brick gives it to its owner
    text = outcome(task, said, timeout=30)
    assert task.exitcode == 0, text
    assert text == "settled"
    assert list(backup.iterdir()) == [], "the probe it made is removed"


def test_a_directory_the_task_can_never_write_fails_with_its_owner_and_what_to_set(volume):
    locked = volume / "locked"
    locked.mkdir(mode=0o755)
    t0 = time.monotonic()
    task, said = as_task(locked / "backup", settle=2)
    err = outcome(task, said, timeout=30)
    assert task.exitcode != 0
    assert time.monotonic() - t0 >= 2, "it waited the settle time first"
    assert f"as uid {TASK_UID}" in err and "podSecurityContext.fsGroup" in err, err
    assert f"cannot create entries in {locked / 'backup'}" in err, err
    assert f"{locked} is owned by uid 0 gid 0, mode 755" in err, err


def test_a_writable_directory_is_made_at_once(volume):
    os.chown(volume, TASK_UID, TASK_UID)
    t0 = time.monotonic()
    task, said = as_task(volume / "a" / "b", settle=20)
    text = outcome(task, said, timeout=30)
    assert task.exitcode == 0, text
    assert time.monotonic() - t0 < 10
    assert (volume / "a" / "b").is_dir() and list((volume / "a" / "b").iterdir()) == []
