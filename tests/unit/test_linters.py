"""The ecosystem's linters over the chart, built from registry packages (kubeconform from its Go
module, yamllint from PyPI), with the project's own configuration; each shown able to fail."""

from __future__ import annotations

import subprocess

import pytest

from rendering import EXAMPLES
from tf_cluster import CHART, ROOT, TOOLS_BIN, helm, validate

CASES = sorted((ROOT / "tests" / "golden" / "cases").glob("*.yaml"))
VERSIONS = ("1.29", validate.newest_version())  # the chart's kubeVersion floor and the newest schemas


def yamllint(*paths) -> subprocess.CompletedProcess:
    argv = [str(ROOT / ".venv" / "bin" / "yamllint"), "-s", "-c", str(ROOT / ".yamllint"), *map(str, paths)]
    return subprocess.run(argv, capture_output=True, text=True)


def test_yamllint_passes_on_the_charts_yaml_and_the_examples():
    r = yamllint(CHART / "Chart.yaml", CHART / "values.yaml", ROOT / "values-examples", ROOT / ".yamllint")
    assert r.returncode == 0, r.stdout


def test_yamllint_catches_a_duplicate_key(tmp_path):
    bad = tmp_path / "values.yaml"
    bad.write_text("image:\n  tag: a\nimage:\n  tag: b\n")
    r = yamllint(bad)
    assert r.returncode != 0 and "duplication of key" in r.stdout


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("values", [*EXAMPLES, *CASES], ids=lambda p: p.stem)
def test_kubeconform_strict_finds_no_error(values, version):
    assert (TOOLS_BIN / "kubeconform").exists(), "make setup builds kubeconform"
    text = helm.template([values])
    r = validate.kubeconform(text, version)
    assert r.returncode == 0 and "Invalid: 0, Errors: 0" in r.stdout, r.stdout + r.stderr
    print(f"{values.stem} on Kubernetes {version}: {r.stdout.strip().splitlines()[-1]}")


def test_kubeconform_catches_an_unknown_field():
    text = helm.template([EXAMPLES[0]]).replace("completionMode: Indexed", "completionMode: Indexed\n  bogus: 1", 1)
    r = validate.kubeconform(text, VERSIONS[-1])
    assert r.returncode != 0 and "additional properties 'bogus' not allowed" in r.stdout
