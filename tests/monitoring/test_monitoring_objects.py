"""The chart's Prometheus Operator objects: when the PodMonitor and the PrometheusRule render
(metrics.podMonitor/prometheusRule.enabled: auto, true, false), what the PodMonitor selects, and
both validated against the Prometheus Operator's published CRDs (tooling/tf_cluster/crds/, unknown
fields refused), the way `tf-cluster validate` checks them."""

from __future__ import annotations

import copy

import pytest

import promql
from tf_cluster import helm, schemas

MONITORING = ("PodMonitor", "PrometheusRule")


def rendered_kinds(text: str) -> set[str]:
    return {d["kind"] for d in helm.parse(text)} & set(MONITORING)


@pytest.mark.parametrize(
    ("sets", "api", "expected"),
    [
        pytest.param((), False, set(), id="auto-without-the-api"),
        pytest.param((), True, {"PodMonitor", "PrometheusRule"}, id="auto-with-the-api"),
        pytest.param(("metrics.podMonitor.enabled=true",), False, {"PodMonitor"}, id="podmonitor-true"),
        pytest.param(("metrics.prometheusRule.enabled=true",), False, {"PrometheusRule"}, id="rule-true"),
        pytest.param(("metrics.podMonitor.enabled=false",), True, {"PrometheusRule"}, id="podmonitor-false"),
        pytest.param(("metrics.prometheusRule.enabled=false",), True, {"PodMonitor"}, id="rule-false"),
        pytest.param(("metrics.enabled=false",), True, set(), id="no-exporter"),
    ],
)
def test_when_the_operator_objects_render(sets, api, expected):
    assert rendered_kinds(promql.render(sets, api=api)) == expected


@pytest.mark.parametrize("value", ["podMonitor", "prometheusRule", "dashboard"])
def test_an_object_asked_for_without_the_exporter_is_refused(value):
    proc = helm.Helm("4").render("tf", helm.Values.of(set=["metrics.enabled=false", f"metrics.{value}.enabled=true"]))
    assert proc.returncode != 0
    assert f"metrics.{value}.enabled=true needs metrics.enabled=true" in proc.stderr


def test_the_podmonitor_selects_this_releases_pods_and_their_metrics_port():
    text = promql.render()
    (monitor,) = promql.kinds(text, "PodMonitor")
    spec = monitor["spec"]
    assert spec["namespaceSelector"] == {"matchNames": [promql.NAMESPACE]}
    assert spec["podMetricsEndpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "15s"}]
    selector = spec["selector"]["matchLabels"]
    assert selector["app.kubernetes.io/instance"] == promql.RELEASE
    templates = [j["spec"]["template"] for j in promql.kinds(text, "Job")]
    assert templates and all(selector.items() <= t["metadata"]["labels"].items() for t in templates)
    other = promql.render(release="other")
    assert not any(
        selector.items() <= t["spec"]["template"]["metadata"]["labels"].items() for t in promql.kinds(other, "Job")
    )


def test_every_task_has_the_port_the_podmonitor_scrapes():
    """The container port named `metrics`, metrics.port (the launcher's exporter, issue 34)."""
    pods = [j["spec"]["template"]["spec"] for j in promql.kinds(promql.render(), "Job")]
    ports = [[p for c in pod["containers"] for p in c.get("ports", []) if p.get("name") == "metrics"] for pod in pods]
    assert pods and all(p == [{"name": "metrics", "containerPort": 9464, "protocol": "TCP"}] for p in ports), ports


def test_interval_and_extra_labels_come_from_values():
    sets = (
        "metrics.podMonitor.interval=30s",
        "metrics.podMonitor.labels.release=kube-prometheus-stack",
        "metrics.prometheusRule.labels.role=alert-rules",
        "metrics.podMonitor.labels.app\\.kubernetes\\.io/instance=not-this",
    )
    text = promql.render(sets)
    (monitor,) = promql.kinds(text, "PodMonitor")
    (rule,) = promql.kinds(text, "PrometheusRule")
    assert monitor["spec"]["podMetricsEndpoints"][0]["interval"] == "30s"
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["metadata"]["labels"]["app.kubernetes.io/instance"] == promql.RELEASE, "the chart's labels win"
    assert rule["metadata"]["labels"]["role"] == "alert-rules"
    for obj in (monitor, rule):
        assert obj["metadata"]["labels"]["app.kubernetes.io/component"] == "metrics"
        assert obj["metadata"]["name"] == f"{promql.RELEASE}-tf-cluster"


def test_helm_4_and_3_render_the_same_objects():
    sets = ("metrics.dashboard.enabled=true",)
    four, three = promql.render(sets, major="4"), promql.render(sets, major="3")
    for kind in (*MONITORING, "ConfigMap"):
        assert promql.kinds(four, kind) == promql.kinds(three, kind)


# ------------------------------------------------------------------ the published CRDs


def test_the_rendered_objects_validate_against_the_published_crds():
    docs = helm.parse(promql.render(("metrics.dashboard.enabled=true",)))
    for kind in MONITORING:
        (obj,) = [d for d in docs if d["kind"] == kind]
        assert ("monitoring.coreos.com/v1", kind) in schemas.crd_schemas(), "vendored in tooling/tf_cluster/crds/"
        assert schemas.validate_custom(obj) == [], obj
    assert schemas.validate_docs(docs, ("1.37",)) == []


def _misspelt_endpoint(obj):
    obj["spec"]["podMetricsEndpoints"][0]["intervall"] = obj["spec"]["podMetricsEndpoints"][0].pop("interval")


def _bad_interval(obj):
    obj["spec"]["podMetricsEndpoints"][0]["interval"] = "15 seconds"


def _rule_without_expr(obj):
    del obj["spec"]["groups"][0]["rules"][0]["expr"]


def _bad_for(obj):
    obj["spec"]["groups"][0]["rules"][0]["for"] = "ten minutes"


def _misspelt_rules(obj):
    obj["spec"]["groups"][0]["alerts"] = obj["spec"]["groups"][0].pop("rules")


@pytest.mark.parametrize(
    ("kind", "breaks", "path", "message"),
    [
        ("PodMonitor", _misspelt_endpoint, "spec.podMetricsEndpoints.0", "'intervall' was unexpected"),
        ("PodMonitor", _bad_interval, "spec.podMetricsEndpoints.0.interval", "'15 seconds' does not match"),
        ("PrometheusRule", _rule_without_expr, "spec.groups.0.rules.0", "'expr' is a required property"),
        ("PrometheusRule", _bad_for, "spec.groups.0.rules.0.for", "'ten minutes' does not match"),
        ("PrometheusRule", _misspelt_rules, "spec.groups.0", "'alerts' was unexpected"),
    ],
    ids=lambda v: v.__name__.strip("_") if callable(v) else None,
)
def test_a_broken_object_fails_with_the_validators_message(kind, breaks, path, message):
    docs = helm.parse(promql.render())
    (obj,) = [copy.deepcopy(d) for d in docs if d["kind"] == kind]
    breaks(obj)
    (problem,) = schemas.validate_custom(obj)
    assert problem.path == path
    assert message in problem.message
    assert str(problem).startswith(f"Kubernetes CRD: {kind}/{promql.RELEASE}-tf-cluster at {path}: ")
    problems = schemas.validate_docs([obj if d["kind"] == kind else d for d in docs], ("1.37",))
    assert [str(p) for p in problems] == [str(problem)]
