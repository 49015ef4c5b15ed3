"""A program's extra Python packages for local runs: `run-local --requirements FILE`.

One cached virtualenv per (requirements text, project pins, Python), in
~/.cache/tf-cluster/requirements/<key>/, layered on this checkout's environment: a `.pth`
file puts the project's site-packages (TensorFlow and the rest) after the layer's own, so pip
installs only what the project lacks, never touches the project's environment, and a version
the file pins differently shadows the project's copy. The project's pins are constraints, as
in the image (`tf-cluster build --requirements`), so a conflict fails here, at install time,
with pip's own message. Isolated tasks see the layer at the image's /opt/venv and the project
environment at BASE_MOUNT: the `.pth` names both (site.py skips the one that does not exist).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

from . import REQUIREMENTS
from .errors import UsageError
from .streaming import run_streaming

CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tf-cluster" / "requirements"
BASE_MOUNT = "/opt/tf-cluster/base-venv"  # where isolated tasks see the project's environment
BASE_FILE = "tf-cluster-base"  # in the layer: the project environment it extends
CONSTRAINTS = REQUIREMENTS  # the project's pins (package data when installed)


def key(requirements: str, python: str = sys.executable) -> str:
    h = hashlib.sha256()
    for part in (requirements, CONSTRAINTS.read_text(), python, sys.version):
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:16]


def environment(requirements: Path, python: str = sys.executable, say=print) -> str:
    """The python of a cached environment with these requirements on top of `python`'s."""
    if not requirements.is_file():
        raise UsageError(f"--requirements {requirements}: no such file")
    text = requirements.read_text()
    env = CACHE / key(text, python)
    done = env / ".complete"
    wanted = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    if done.exists():
        say(f"[requirements] {len(wanted)} requirement(s) from {requirements}: cached environment {env}")
        return str(env / "bin" / "python")
    say(f"[requirements] installing {len(wanted)} requirement(s) from {requirements} into {env} (once; cached)")
    if env.exists():
        shutil.rmtree(env)  # an earlier attempt that did not finish
    t0 = time.monotonic()
    subprocess.run([python, "-m", "venv", "--without-pip", str(env)], check=True)
    base_site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    base = Path(base_site).parents[2]  # <venv>/lib/pythonX.Y/site-packages
    layer_site = Path(sysconfig.get_paths(vars={"base": str(env), "platbase": str(env)})["purelib"])
    (layer_site / "_tf_cluster_base.pth").write_text(f"{base_site}\n{BASE_MOUNT}/{Path(base_site).relative_to(base)}\n")
    (env / BASE_FILE).write_text(str(base))
    argv = [python, "-m", "pip", "--python", str(env / "bin" / "python"), "install", "--progress-bar", "off"]
    argv += ["-c", str(CONSTRAINTS), "-r", str(requirements)]
    shows = ("Collecting", "Installing", "Successfully", "ERROR")
    code, tail, _ = run_streaming(argv, lambda line: line.startswith(shows), say, "requirements", keep=15)
    if code != 0:
        shutil.rmtree(env, ignore_errors=True)
        raise UsageError(
            f"--requirements {requirements}: pip could not install it on top of the project's pins "
            f"({CONSTRAINTS}); fix the file (a pinned version the project also pins "
            "must match). pip said:\n  " + "\n  ".join(tail)
        )
    done.write_text(text)
    say(f"[requirements] ready in {time.monotonic() - t0:.1f}s")
    return str(env / "bin" / "python")
