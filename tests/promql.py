"""The monitoring tests' shared facts (tests/monitoring/; import it as `promql`, `pytest.ini` puts
`tests/` on the path): the series every task exports, the chart rendered as a cluster with the
Prometheus Operator gets it, and the metric names a PromQL expression reads."""

from __future__ import annotations

import re

from tf_cluster import helm

# The series every task's launcher exports (files/launcher.py; issue 34), labels release, role,
# index, run (and the target's namespace, pod); tf_cluster_task_metric has a `name` label.
EXPORTED = frozenset(
    {
        "tf_cluster_task_state",
        "tf_cluster_task_epoch",
        "tf_cluster_task_epochs",
        "tf_cluster_task_step",
        "tf_cluster_task_loss",
        "tf_cluster_task_metric",
        "tf_cluster_task_steps_per_second",
        "tf_cluster_task_examples_per_second",
        "tf_cluster_task_peer_wait_seconds",
        "tf_cluster_task_last_progress_timestamp_seconds",
        "tf_cluster_task_start_timestamp_seconds",
        "tf_cluster_task_index_failures",
    }
)
# kube-state-metrics' series TFClusterGangWaiting reads (its pods' phase, age and labels)
KUBE_STATE_METRICS = frozenset(
    {"kube_pod_status_phase", "kube_pod_status_unschedulable", "kube_pod_created", "kube_pod_labels"}
)

API = "monitoring.coreos.com/v1"  # what `helm template --api-versions` says the cluster serves
RELEASE, NAMESPACE = "mnist", "ml"


def render(sets: tuple[str, ...] = (), *, api: bool = True, major: str = "4", release: str = RELEASE) -> str:
    """The chart's manifests for release mnist in namespace ml, on a cluster that serves the
    Prometheus Operator's API (`api`) or not."""
    return helm.Helm(major, namespace=NAMESPACE).template(
        release, helm.Values.of(set=sets), api_versions=[API] if api else []
    )


def kinds(text: str, kind: str) -> list[dict]:
    return [d for d in helm.parse(text) if d["kind"] == kind]


# Words of PromQL that are no metric names: operators, modifiers, the number literals.
KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset", "inf", "nan", "atan2"})


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: its identifiers once string literals, label
    matchers, ranges, label lists (`by (...)`, `on (...)` ...) and Grafana variables are taken out,
    less function and aggregation names (followed by `(`) and PromQL's keywords."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', '""', expr)
    s = re.sub(r"\{[^}]*\}", " ", s)
    s = re.sub(r"\[[^\]]*\]", " ", s)
    s = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    s = re.sub(r"\$\{?\w+\}?", " ", s)
    found = re.finditer(r"(?<![\w:.])([a-zA-Z_:][\w:]*)(?![\w:])(?!\s*\()", s)
    return {m.group(1) for m in found if m.group(1).lower() not in KEYWORDS}
