"""The PrometheusRule's alerts, run by Prometheus' own promtool (Debian's `prometheus` package;
`make test` installs it: hack/node/build.sh `promtool`). The chart is rendered as a cluster with
the Prometheus Operator gets it (`--api-versions monitoring.coreos.com/v1`), release mnist in
namespace ml; its PrometheusRule's `spec.groups` become a rules file, which `promtool check rules`
checks and `promtool test rules` runs against the cases in rules/*.test.yaml: every alert firing
and not, for this release only."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

import promql

CASES = Path(__file__).parent / "rules"
# The rules files the cases name (`rule_files`), and the values each is rendered with.
RULE_FILES = {
    "default.rules.yaml": (),
    "thresholds.rules.yaml": (
        "metrics.prometheusRule.stallMinutes=3",
        "metrics.prometheusRule.restarts=5",
        "metrics.prometheusRule.gangWaitMinutes=2",
    ),
}
ALERTS = {"TFClusterTrainingStalled", "TFClusterTaskRestarting", "TFClusterLossNotFinite", "TFClusterGangWaiting"}


def promtool() -> str:
    path = shutil.which("promtool")
    assert path, "promtool is missing: `make test` installs Debian's prometheus package (apt-get install prometheus)"
    return path


def rule_groups(sets: tuple[str, ...] = ()) -> list[dict]:
    (rule,) = promql.kinds(promql.render(sets), "PrometheusRule")
    return rule["spec"]["groups"]


def rules_of(groups: list[dict]) -> list[dict]:
    return [r for g in groups for r in g["rules"]]


@pytest.fixture(scope="module")
def rules_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("rules")
    for name, sets in RULE_FILES.items():
        (out / name).write_text(yaml.safe_dump({"groups": rule_groups(sets)}, sort_keys=False, width=1000))
    return out


def test_promtool_checks_the_rendered_rules(rules_dir):
    for name in RULE_FILES:
        r = subprocess.run([promtool(), "check", "rules", str(rules_dir / name)], capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"SUCCESS: {len(ALERTS)} rules found" in r.stdout


@pytest.mark.parametrize("case", sorted(CASES.glob("*.test.yaml")), ids=lambda p: p.name.removesuffix(".test.yaml"))
def test_promtool_unit_tests_pass(case, rules_dir):
    """`promtool test rules` on a case, beside the rules file it names (paths are relative to it)."""
    assert set(yaml.safe_load(case.read_text())["rule_files"]) <= set(RULE_FILES), "a rules file RULE_FILES renders"
    shutil.copy(case, rules_dir / case.name)
    r = subprocess.run([promtool(), "test", "rules", case.name], cwd=rules_dir, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout


def test_every_alert_is_tested_firing_and_not_firing():
    fires: set[str] = set()
    silent: set[str] = set()
    for case in CASES.glob("*.test.yaml"):
        for group in yaml.safe_load(case.read_text())["tests"]:
            for t in group.get("alert_rule_test", []):
                (fires if t.get("exp_alerts") else silent).add(t["alertname"])
    assert {r["alert"] for r in rules_of(rule_groups())} == ALERTS
    assert fires == ALERTS, f"no firing case for {ALERTS - fires}"
    assert silent == ALERTS, f"no silent case for {ALERTS - silent}"


def test_rules_read_only_the_exported_series_and_kube_state_metrics():
    for rule in rules_of(rule_groups()):
        names = promql.metric_names(rule["expr"])
        assert names, rule["alert"]
        assert names <= promql.EXPORTED | promql.KUBE_STATE_METRICS, (rule["alert"], names)


def test_every_selector_is_scoped_to_the_release():
    """Each series a rule reads is selected by this release's namespace, and the tasks' by its
    release label, kube-state-metrics' by the pods' instance label or joined with it."""
    for rule in rules_of(rule_groups()):
        for name in promql.metric_names(rule["expr"]):
            for selector in re.findall(rf"\b{name}\{{([^}}]*)\}}", rule["expr"]):
                assert f'namespace="{promql.NAMESPACE}"' in selector, (rule["alert"], name, selector)
                if name in promql.EXPORTED:
                    assert f'release="{promql.RELEASE}"' in selector, (rule["alert"], name, selector)
        if rule["alert"] == "TFClusterGangWaiting":
            assert f'label_app_kubernetes_io_instance="{promql.RELEASE}"' in rule["expr"]


@pytest.mark.parametrize(
    ("sets", "alert", "text"),
    [
        ((), "TFClusterTrainingStalled", "> 600"),
        ((), "TFClusterTrainingStalled", "[10m]"),
        (("metrics.prometheusRule.stallMinutes=25",), "TFClusterTrainingStalled", "> 1500"),
        (("metrics.prometheusRule.stallMinutes=25",), "TFClusterTrainingStalled", "[25m]"),
        (("metrics.prometheusRule.restarts=7",), "TFClusterTaskRestarting", ">= 7"),
        (("metrics.prometheusRule.gangWaitMinutes=30",), "TFClusterGangWaiting", "> 1800"),
    ],
)
def test_thresholds_come_from_values(sets, alert, text):
    (rule,) = [r for r in rules_of(rule_groups(sets)) if r["alert"] == alert]
    assert text in rule["expr"]
