"""The built trainer image runs the MultiWorkerMirrored example in locked-down containers.

Needs a built image (`make image`): skipped, with the reason, when there is none.
Run with `make test-image`.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from tf_cluster import images, progress
from tf_cluster.imagebuild import podman_flags

IMAGE = f"{images.DEFAULT_REPOSITORY}:{images.TF_VERSION}-cpu"


def podman() -> list[str]:
    return ["podman", *podman_flags()]


def have_image() -> bool:
    return (
        bool(shutil.which("podman"))
        and subprocess.run([*podman(), "image", "exists", IMAGE], capture_output=True).returncode == 0
    )


pytestmark = pytest.mark.skipif(not have_image(), reason=f"no {IMAGE} image here: run `make image` first")


def test_mwms_example_trains_in_two_containers_as_the_chart_runs_them(tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    ckpt.chmod(0o777)
    cluster = {"worker": ["localhost:23101", "localhost:23102"]}
    procs = []
    for i in range(2):
        env = {
            "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}}),
            "TF_CLUSTER_ROLE": "worker",
            "TF_TASK_INDEX": str(i),
            "EPOCHS": "2",
            "STEPS_PER_EPOCH": "10",
            "CHECKPOINT_DIR": "/mnt/checkpoints/checkpoints",
            "MODEL_DIR": "/mnt/checkpoints/model",
        }
        argv = [
            *podman(),
            "run",
            "--rm",
            "--network",
            "host",
            "--ulimit",
            "nofile=1024:1024",
            "--ulimit",
            "nproc=4096:4096",  # no higher than the host's
            "--user",
            "1000:1000",
            "--read-only",
            "--tmpfs",
            "/tmp",
            "--cap-drop",
            "ALL",
            "--security-opt",
            "no-new-privileges",
            "-v",
            f"{ckpt}:/mnt/checkpoints",
        ]
        for k, v in env.items():
            argv += ["-e", f"{k}={v}"]
        argv += [
            IMAGE,
            "python3",
            "/opt/tf-cluster/launcher/launcher.py",
            "--",
            "python3",
            "/opt/tf-cluster/trainers/mwms_fit.py",
        ]
        procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    result = progress.TaskProgress.of_log(outs[0]).result
    assert result["chief"] is True and result["model_dir"] == "/mnt/checkpoints/model"
    assert (ckpt / "model" / "saved_model.pb").exists()
