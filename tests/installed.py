"""tf-cluster installed as a user installs it: the wheel built from this checkout, in a fresh
virtualenv outside the repository, run from a folder of its own with a PATH that holds only that
virtualenv, a folder with Helm, and the system's bin folders. Whatever it reads (the chart, the
launcher, the trainers) can then only come from the package's own data.

    exe, user, env = install_wheel(tmp_path_factory.mktemp("installed"), "tensorflow-cpu")
    subprocess.run([exe, "render", "-f", "values.yaml"], cwd=user, env=env)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tf_cluster import REQUIREMENTS, ROOT


def install_wheel(base: Path, *extra: str, helm: str | None = None) -> tuple[str, Path, dict[str, str]]:
    """(the tf-cluster executable, a user folder to run it in, its environment). `extra`: more
    packages for the virtualenv, at the project's pins; `helm`: a Helm binary to put on its PATH
    (copied, so that nothing on the PATH is inside the checkout)."""
    dist = base / "dist"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    built = subprocess.run([*pip, "wheel", "--no-deps", str(ROOT), "-w", str(dist)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    (wheel,) = dist.glob("tf_cluster-*-py3-none-any.whl")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    vpip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "-q", "install"]
    proc = subprocess.run([*vpip, "-c", str(REQUIREMENTS), str(wheel), *extra], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    path = [str(venv / "bin")]
    if helm:
        tools = base / "tools"
        tools.mkdir()
        shutil.copy2(helm, tools / "helm")
        path.append(str(tools))
    user = base / "user"
    user.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_CLUSTER_", "PYTHON", "VIRTUAL_ENV"))}
    env["PATH"] = ":".join([*path, "/usr/local/bin", "/usr/bin", "/bin"])
    return str(venv / "bin" / "tf-cluster"), user, env
