"""The values reference in charts/tf-cluster/README.md is generated, never hand-copied."""

from __future__ import annotations

import subprocess

from tf_cluster import CHART, ROOT, TOOLS_BIN


def test_chart_readme_is_generated_from_the_current_values():
    proc = subprocess.run(
        [
            str(TOOLS_BIN / "helm-docs"),
            "--chart-search-root",
            str(ROOT / "charts"),
            "--template-files",
            "README.md.gotmpl",
            "--dry-run",
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    assert proc.stdout.strip() == (CHART / "README.md").read_text().strip(), "run `make docs`"


def test_every_value_is_documented():
    import yaml

    readme = (CHART / "README.md").read_text()
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def leaves(d, prefix=""):
        for k, v in d.items():
            key = f"{prefix}{k}"
            if (
                isinstance(v, dict)
                and v
                # Kubernetes objects documented whole (a `resources` with its defaults, too)
                and k not in ("podSecurityContext", "securityContext", "podAnnotations", "labels", "resources")
                # maps whose keys are the user's (module -> pip requirement), documented whole
                and key not in ("packages.training", "packages.tensorboard")
            ):
                yield from leaves(v, key + ".")
            else:
                yield key

    missing = [k for k in leaves(values) if f"| {k} |" not in readme]
    assert missing == []


def test_the_test_tiers_page_lists_what_ci_and_check_all_run():
    """docs/test-tiers.md (which tests `.ci/run` runs, which only `make check-all`) is what pytest
    collects today: a test marked or unmarked `extended` without `make tiers` fails here."""
    import sys

    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "tiers.py"), "--check"], capture_output=True, text=True, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
