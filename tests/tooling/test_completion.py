"""Shell completion (argcomplete): the script `tf-cluster completion bash` prints, sourced into a
real bash, completes the command's verbs and options (issue 42)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent  # the venv's bin: its `tf-cluster` entry point


def complete(line: str) -> list[str]:
    """What bash completes at the end of `line`, through the sourced script's own function."""
    words = line.split(" ")
    script = (
        "source <(tf-cluster completion bash)\n"
        f'COMP_LINE="{line}"; COMP_POINT=${{#COMP_LINE}}; COMP_WORDS=({" ".join(repr(w) for w in words)}); '
        f"COMP_CWORD={len(words) - 1}\n"
        f'_python_argcomplete tf-cluster "{words[-1]}" "{words[-2]}"\n'
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    return [w.strip() for w in r.stdout.splitlines() if w.strip()]


@pytest.mark.needs("bash", lambda: shutil.which("bash") is not None, "install bash")
def test_bash_completes_verbs_and_options():
    assert complete("tf-cluster ru") == ["run-local"]
    assert set(complete("tf-cluster s")) == {"smoke", "status"}
    assert complete("tf-cluster validate --kube") == ["--kube-version"]
    assert complete("tf-cluster completion z") == ["zsh"]


def test_the_zsh_script_registers_the_command():
    r = subprocess.run([BIN / "tf-cluster", "completion", "zsh"], capture_output=True, text=True)
    assert r.returncode == 0 and "compdef _python_argcomplete tf-cluster" in r.stdout
