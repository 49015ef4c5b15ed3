"""`run-local --requirements`: a program's extra packages in a cached environment layered on
this checkout's, seen by isolated tasks at the image's /opt/venv (real pip, real TensorFlow)."""

from __future__ import annotations

import pytest

from tf_cluster import ROOT, images, requirements
from tf_cluster.cli import main
from tf_cluster.errors import UsageError

PROGRAM = """
import sys, tabulate, tensorflow as tf
print("USING", tabulate.__version__, tabulate.__file__, tf.__version__, sys.executable, flush=True)
"""


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setattr(requirements, "CACHE", tmp_path / "cache")
    return tmp_path / "cache"


def test_a_program_gets_its_requirements_installed_once_and_cached(tmp_path, cache, capsys):
    (tmp_path / "prog.py").write_text(PROGRAM)
    (tmp_path / "requirements.txt").write_text("tabulate==0.9.0\n")
    base = (ROOT / ".venv" / "lib").glob("python3*/site-packages/six.py")
    before = [p.stat().st_mtime for p in base]
    argv = ["run-local", "--script", str(tmp_path / "prog.py"), "--requirements", str(tmp_path / "requirements.txt")]
    argv += ["--set", "roles.worker.replicas=1", "--workdir", str(tmp_path / "run"), "--timeout", "120"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "installing 1 requirement(s)" in out and "Successfully installed tabulate-0.9.0" in out
    using = next(ln for ln in out.splitlines() if "USING" in ln).split()
    assert using[1:] == [  # the layer at the image's /opt/venv, TensorFlow from this checkout's environment
        "USING",
        "0.9.0",
        "/opt/venv/lib/python3.11/site-packages/tabulate/__init__.py",
        images.tf_version(),  # the chart's appVersion, which the checkout pins
        "/opt/venv/bin/python",
    ]
    assert main(argv) == 0  # the second time from the cache: no pip
    out = capsys.readouterr().out
    assert "cached environment" in out and "installing" not in out
    assert len(list(cache.iterdir())) == 1
    assert [p.stat().st_mtime for p in (ROOT / ".venv" / "lib").glob("python3*/site-packages/six.py")] == before


def test_a_requirement_that_conflicts_with_the_project_pins_is_refused_before_anything_runs(tmp_path, cache):
    pins = (ROOT / "tooling" / "requirements.txt").read_text().splitlines()
    pinned = next(ln for ln in pins if ln.startswith("six=="))
    (tmp_path / "requirements.txt").write_text("six==1.15.0\n")
    assert pinned != "six==1.15.0"
    with pytest.raises(
        UsageError,
        match=r"(?s)--requirements .*: pip could not install it .*requested six==1.15.0.*six==1.17.0",
    ):
        requirements.environment(tmp_path / "requirements.txt", say=lambda s: None)
    assert not any(cache.iterdir())  # nothing half-made is left to be taken for a cached environment
