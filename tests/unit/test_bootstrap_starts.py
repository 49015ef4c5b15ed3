"""make setup's two threads start processes side by side (tooling/bootstrap.py): a program one of
them has just written can be open for writing in the other's forked child, and executing it then
fails with ETXTBSY. A cold CI lost its virtualenv so in its first second. The venvs are now made
with a link to the interpreter (nothing copied, then run) and such a start is tried again."""

from __future__ import annotations

import errno
import subprocess
import sys

import pytest

from tf_cluster import ROOT

sys.path.insert(0, str(ROOT / "tooling"))
import bootstrap  # noqa: E402


def test_a_text_busy_start_is_tried_again_and_another_error_is_not(monkeypatch):
    monkeypatch.setattr(bootstrap.time, "sleep", lambda s: None)
    calls = []

    def busy_twice():
        calls.append(1)
        if len(calls) < 3:
            raise OSError(errno.ETXTBSY, "Text file busy")
        return "started"

    assert bootstrap.retry_text_busy(busy_twice) == "started" and len(calls) == 3

    def always_busy():
        raise OSError(errno.ETXTBSY, "Text file busy")

    with pytest.raises(OSError, match="Text file busy"):
        bootstrap.retry_text_busy(always_busy)

    missing = []

    def not_there():
        missing.append(1)
        raise FileNotFoundError(errno.ENOENT, "no such file")

    with pytest.raises(FileNotFoundError):
        bootstrap.retry_text_busy(not_there)
    assert len(missing) == 1


def test_the_virtualenv_links_its_python_and_has_pip(tmp_path):
    bootstrap.make_venv(tmp_path / "v")
    py = tmp_path / "v" / "bin" / "python"
    assert py.is_symlink()
    out = subprocess.run([py, "-m", "pip", "--version"], capture_output=True, text=True, check=True).stdout
    assert str(tmp_path / "v") in out
