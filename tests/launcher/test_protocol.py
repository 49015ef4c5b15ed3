"""The launcher's protocol, not its bytes, names the Jobs (tests/launcher/protocol.py says how the
code is judged): a pure refactor renames no Job, a behaviour change without a new PROTOCOL fails."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from tf_cluster import CHART, helm

sys.path.insert(0, str(Path(__file__).parent))
import protocol  # noqa: E402


def test_the_launchers_code_is_the_one_its_protocol_recorded():
    assert protocol.problem() is None, protocol.problem()


def chart_copy(tmp_path: Path) -> Path:
    out = tmp_path / "tf-cluster"
    shutil.copytree(CHART, out, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return out


def job_names(chart: Path) -> list[str]:
    text = helm.Helm("4").template("tf", chart=chart)
    return sorted(d["metadata"]["name"] for d in yaml.safe_load_all(text) if d and d["kind"] == "Job")


def test_a_pure_refactor_renames_no_job_and_keeps_the_protocol(tmp_path):
    """Move `host_of` from tfconfig.py to common.py (its callers import it from there), reword a
    comment and a docstring: the launcher still imports, the fingerprint holds, no Job is renamed."""
    chart = chart_copy(tmp_path)
    package = chart / "files" / "tf_cluster_launcher"
    tfconfig, common = (package / "tfconfig.py").read_text(), (package / "common.py").read_text()
    moved = re.search(r"\ndef host_of\(.*?\n(?=\n\n)", tfconfig, re.S)
    assert moved, "tfconfig.py defines host_of (pick another function if it moved)"
    tfconfig = tfconfig.replace(moved.group(0), "").replace("from .common import ", "from .common import host_of, ")
    (package / "tfconfig.py").write_text(tfconfig.replace('"""TF_CONFIG read', '"""TF_CONFIG, as read'))
    (package / "common.py").write_text(common + "\n" + moved.group(0).lstrip("\n") + "  # moved here\n")
    for user in package.glob("*.py"):  # whoever imported host_of from tfconfig now takes it from common
        text = user.read_text()
        if "host_of" in text and user.name not in ("tfconfig.py", "common.py"):
            text = re.sub(r"from \.tfconfig import ([^\n]*)\bhost_of, ", r"from .tfconfig import \1", text)
            user.write_text(text.replace("from .common import ", "from .common import host_of, ", 1))
    check = [sys.executable, "-c", "import tf_cluster_launcher.task, tf_cluster_launcher.tfconfig as t; t.host_of"]
    subprocess.run(check, cwd=chart / "files", check=True, timeout=60)
    assert protocol.fingerprint(chart / "files") == protocol.fingerprint()
    assert (package / "common.py").read_bytes() != (CHART / "files" / "tf_cluster_launcher" / "common.py").read_bytes()
    assert job_names(chart) == job_names(CHART)


def test_a_behaviour_change_without_a_new_protocol_fails(tmp_path):
    """The peer timeout's exit code 4 -> 7: the Jobs keep their names (the protocol alone names
    them), which is why the recorded fingerprint must catch it; with PROTOCOL bumped and recorded it
    passes, and the Jobs are renamed."""
    chart = chart_copy(tmp_path)
    common = chart / "files" / "tf_cluster_launcher" / "common.py"
    common.write_text(common.read_text().replace("EXIT_PEERS_TIMEOUT = 4", "EXIT_PEERS_TIMEOUT = 7"))
    assert "EXIT_PEERS_TIMEOUT = 7" in common.read_text()
    why = protocol.problem(chart / "files")
    assert why and "PROTOCOL did not" in why and "PROTOCOL = " in why, why
    assert job_names(chart) == job_names(CHART)

    init = chart / "files" / "tf_cluster_launcher" / "__init__.py"
    number = protocol.protocol()
    init.write_text(init.read_text().replace(f"PROTOCOL = {number}", f"PROTOCOL = {number + 1}"))
    lock = tmp_path / "protocols.json"
    lock.write_text(
        protocol.LOCK.read_text().replace("}", f', "{number + 1}": "{protocol.fingerprint(chart / "files")}"}}')
    )
    assert protocol.problem(chart / "files", lock) is None
    assert job_names(chart) != job_names(CHART)
