"""`tf-cluster chart`: the chart the command carries, handed to Helm (issue 42)."""

from __future__ import annotations

import subprocess
import sys

from tf_cluster import CHART, ROOT, helm


def tf_cluster(*argv, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tf_cluster.cli", *map(str, argv)], capture_output=True, text=True, cwd=cwd
    )


def test_path_is_the_chart_this_command_renders():
    r = tf_cluster("chart", "path")
    assert r.returncode == 0 and r.stdout.strip() == str(CHART)


def test_an_exported_chart_renders_as_the_bundled_one_and_leaves_out_what_helm_package_would(tmp_path):
    r = tf_cluster("chart", "export", tmp_path)
    assert r.returncode == 0, r.stderr
    exported = tmp_path / "tf-cluster"
    assert f"helm install RELEASE {exported} -f values.yaml" in r.stdout
    names = {p.relative_to(exported).as_posix() for p in exported.rglob("*")}
    assert {"Chart.yaml", "values.yaml", "values.schema.json", "files/launcher.py"} <= names
    assert not {"README.md.gotmpl", ".values-docs.json.gotmpl"} & names
    assert not any(n.startswith("tests/") for n in names)  # helm-unittest's suites
    assert any(n.startswith("templates/tests/") for n in names)  # the `helm test` Pod stays
    values = helm.Values.of([ROOT / "values-examples" / "parameter-server.yaml"])
    assert helm.Helm().template("tf", values, chart=exported) == helm.Helm().template("tf", values, chart=CHART)


def test_export_never_writes_over_a_directory_in_use(tmp_path):
    (tmp_path / "tf-cluster").mkdir()
    (tmp_path / "tf-cluster" / "mine.txt").write_text("keep")
    r = tf_cluster("chart", "export", tmp_path)
    assert r.returncode == 2
    assert "exists and is not an empty directory" in r.stderr and "nothing was written" in r.stderr
    assert [p.name for p in (tmp_path / "tf-cluster").iterdir()] == ["mine.txt"]
