"""The launcher claims any image's Python 3.8+ (files/tf_cluster_launcher/__init__.py): the oldest
runs it. Found as python3.8 on PATH or pyenv's 3.8 (this machine's image has pyenv's)."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess

import pytest

from tf_cluster import CHART

LAUNCHER = CHART / "files" / "launcher.py"
IMPORT_ALL = (
    "import pkgutil, importlib, tf_cluster_launcher as p\n"
    "for m in pkgutil.iter_modules(p.__path__): importlib.import_module('tf_cluster_launcher.' + m.name)\n"
    "print('ok')"
)


def oldest() -> str | None:
    """A Python 3.8 that runs (pyenv's shim for python3.8 exists even when 3.8 is not selected)."""
    pyenv = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.8*/bin/python3.8")))
    for python in filter(None, [shutil.which("python3.8"), *pyenv]):
        r = subprocess.run([python, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True)
        if r.returncode == 0 and r.stdout.strip() == "(3, 8)":
            return python
    return None


OLDEST = oldest()
pytestmark = pytest.mark.needs("Python 3.8", bool(OLDEST), "python3.8 on PATH, or pyenv install 3.8")


def test_every_module_of_the_launcher_compiles_and_imports_under_python_3_8():
    r = subprocess.run([OLDEST, "-c", IMPORT_ALL], cwd=LAUNCHER.parent, capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout.strip()) == (0, "ok"), r.stderr


def test_a_task_runs_through_the_launcher_under_python_3_8(tmp_path):
    """A worker of no cluster: the child's Keras lines pass through, its exit code is the task's, and
    with metrics on the launcher serves its exporter (the threads, the pipes, the HTTP server)."""
    child = "import sys; print('Epoch 1/1'); print('4/4 - 0s 5ms/step - loss: 0.5'); sys.exit(3)"
    env = {"PATH": os.environ["PATH"], "TF_CLUSTER_ROLE": "worker", "TF_TASK_INDEX": "0"}
    env["TF_CLUSTER_METRICS_PORT"] = "0"
    argv = [OLDEST, str(LAUNCHER), "--", OLDEST, "-c", child]
    r = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 3, r.stderr
    assert "Epoch 1/1" in r.stdout and "loss: 0.5" in r.stdout
    assert "command exited with 3" in r.stderr
