"""The `packages` init container's step (launcher.py --packages), with the real pip: what the
image has is left alone, what it lacks comes from the configured index, a failure says what to do."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

from tf_cluster import CHART

LAUNCHER = CHART / "files" / "launcher.py"


def wheel(dest: Path, name: str = "tfc_demo_pkg", version: str = "1.0") -> Path:
    """A minimal pure-Python wheel of a module `name` that sets VERSION."""
    path = dest / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f"VERSION = {version!r}\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    with zipfile.ZipFile(path, "w") as z:
        for arc, text in files.items():
            z.writestr(arc, text)
        z.writestr(f"{info}/RECORD", "".join(f"{a},,\n" for a in files) + f"{info}/RECORD,,\n")
    return path


def packages(tmp_path, *pairs, **env):
    target = tmp_path / "packages"
    full = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    full.update({"PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "HOME": str(tmp_path), **env})
    p = subprocess.run(
        [sys.executable, str(LAUNCHER), "--packages", str(target), *pairs],
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return p, target


def test_what_the_image_has_is_not_installed(tmp_path):
    p, target = packages(tmp_path, "json=json-is-stdlib==1.0", "zipfile=nothing==1")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "the image has every one" in p.stdout
    assert not target.exists()


def test_what_the_image_lacks_comes_from_the_configured_index(tmp_path):
    index = tmp_path / "index"
    index.mkdir()
    wheel(index)
    p, target = packages(tmp_path, "json=x==1", "tfc_demo_pkg=tfc-demo-pkg==1.0", PIP_FIND_LINKS=str(index))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "the image lacks tfc-demo-pkg==1.0" in p.stdout and "installed tfc-demo-pkg==1.0 in" in p.stdout
    got = subprocess.run(
        [sys.executable, "-c", "import tfc_demo_pkg; print(tfc_demo_pkg.VERSION)"],
        env={**os.environ, "PYTHONPATH": str(target)},
        capture_output=True,
        text=True,
    )
    assert got.stdout.strip() == "1.0", got.stderr


def test_no_index_fails_the_pod_and_says_what_to_do(tmp_path):
    p, target = packages(tmp_path, "tfc_demo_pkg=tfc-demo-pkg==1.0")
    assert p.returncode == 1
    assert "pip exited" in p.stdout and "packages.pipEnv (PIP_INDEX_URL)" in p.stdout
    assert "packages.enabled=false" in p.stdout


def test_a_malformed_pair_is_a_usage_error(tmp_path):
    p, _ = packages(tmp_path, "tf-keras==2.21.0")
    assert p.returncode == 2 and "is not MODULE=REQUIREMENT" in p.stdout
