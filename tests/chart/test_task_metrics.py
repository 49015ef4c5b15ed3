"""Every task's metrics exporter as the chart wires it (metrics.*): the container port named `metrics`,
the launcher's environment, the scrape annotations when no PodMonitor renders, the NetworkPolicy rule
that admits only metrics.scrapers; and no trace of any of it with metrics.enabled=false. Rendered by
the real helm binaries (Helm 4 and 3). What the exporter serves is tests/launcher/test_exporter.py's."""

from __future__ import annotations

import json

import pytest

from tf_cluster import ROOT, helm, manifests

PS_EVAL = ROOT / "values-examples" / "parameter-server-evaluator.yaml"  # chief, worker, ps and evaluator
MONITORING_API = "monitoring.coreos.com/v1"
SCRAPE = {"prometheus.io/scrape": "true", "prometheus.io/port": "9464", "prometheus.io/path": "/metrics"}
LAUNCHER_MAPS = ("-launcher", "-launcher-package")
METRICS_ENV = ("TF_CLUSTER_METRICS_PORT", "TF_CLUSTER_RELEASE", "TF_CLUSTER_RUN", "TF_CLUSTER_INDEX_FAILURES")


def render(*sets: str, set_json=(), api=False, major="4", files=(PS_EVAL,)) -> list[dict]:
    values = helm.Values.of(files, sets, set_json=set_json)
    return helm.parse(helm.Helm(major).template("rel", values, api_versions=[MONITORING_API] if api else []))


def templates(docs) -> dict[str, dict]:
    """role -> its Job's pod template, with the rendered ConfigMaps' data under `configMaps` (what
    `env` reads the run's environment from)."""
    maps = manifests.config_maps(docs)
    return {
        d["metadata"]["labels"]["app.kubernetes.io/component"]: {**d["spec"]["template"], "configMaps": maps}
        for d in docs
        if d["kind"] == "Job"
    }


def container(template) -> dict:
    (c,) = template["spec"]["containers"]
    return c


def env(template) -> dict[str, dict]:
    """The training container's env entries as its kubelet sees them: the run's ConfigMap by
    `envFrom`, then the pod's own entries."""
    return manifests.env_entries(container(template), template["configMaps"])


def training_policy(docs) -> dict:
    return next(d for d in docs if d["kind"] == "NetworkPolicy" and d["metadata"]["name"].endswith("-training"))


def test_every_task_container_names_the_metrics_port(helm_major):
    for role, t in templates(render(major=helm_major)).items():
        ports = container(t)["ports"]
        assert {"name": "metrics", "containerPort": 9464, "protocol": "TCP"} in ports, role
    # the evaluator runs no TensorFlow server: its only port is the exporter's
    assert container(templates(render(major=helm_major))["evaluator"])["ports"] == [
        {"name": "metrics", "containerPort": 9464, "protocol": "TCP"}
    ]
    for t in templates(render("metrics.port=9100", major=helm_major)).values():
        assert [p["containerPort"] for p in container(t)["ports"] if p["name"] == "metrics"] == [9100]


def test_the_launcher_is_told_its_port_labels_and_index_failures(helm_major):
    for role, t in templates(render(major=helm_major)).items():
        e = env(t)
        assert e["TF_CLUSTER_METRICS_PORT"]["value"] == "9464"
        assert e["TF_CLUSTER_RELEASE"]["value"] == "rel"
        assert e["TF_CLUSTER_RUN"]["value"] == t["metadata"]["labels"]["tf-cluster.io/run"]  # the pods' run label
        assert e["TF_CLUSTER_ROLE"]["value"] == role and "TF_TASK_INDEX" in e
        assert e["TF_CLUSTER_INDEX_FAILURES"]["valueFrom"] == {
            "fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-index-failure-count']"}
        }
    assert env(templates(render("run.suffix=none"))["chief"])["TF_CLUSTER_RUN"]["value"] == "none"


@pytest.mark.parametrize(
    "sets,api,annotated",
    [
        ((), False, True),  # auto, no Prometheus Operator: annotations
        ((), True, False),  # auto, the Operator's API served: its PodMonitor
        (("metrics.podMonitor.enabled=true",), False, False),
        (("metrics.podMonitor.enabled=false",), True, True),
        (("metrics.annotations=false",), False, False),  # neither: the user scrapes their way
    ],
    ids=["auto-no-api", "auto-api", "podmonitor-true", "podmonitor-false", "annotations-off"],
)
def test_scrape_annotations_only_where_no_podmonitor_renders(sets, api, annotated, helm_major):
    docs = render(*sets, api=api, major=helm_major)
    podmonitors = [d for d in docs if d["kind"] == "PodMonitor"]
    for role, t in templates(docs).items():
        shown = {k: v for k, v in t["metadata"]["annotations"].items() if k.startswith("prometheus.io/")}
        assert shown == (SCRAPE if annotated else {}), role
    if annotated:
        assert not podmonitors  # one way to be scraped: never twice
    assert bool(podmonitors) == (("metrics.podMonitor.enabled=true" in sets) or (api and not sets))


def test_the_pods_own_annotations_win_over_the_scrape_annotations():
    docs = render(set_json=['podAnnotations={"prometheus.io/port": "8080", "team": "ml"}'])
    for t in templates(docs).values():
        a = t["metadata"]["annotations"]
        assert (a["prometheus.io/port"], a["prometheus.io/scrape"], a["team"]) == ("8080", "true", "ml")


def test_the_network_policy_admits_only_the_scrapers_to_the_metrics_port(helm_major):
    default, tf_rule = (
        render(major=helm_major),
        {
            "from": [
                {
                    "podSelector": {
                        "matchLabels": {"app.kubernetes.io/name": "tf-cluster", "app.kubernetes.io/instance": "rel"}
                    }
                }
            ],
            "ports": [{"port": 2222, "protocol": "TCP"}],
        },
    )
    assert training_policy(default)["spec"]["ingress"] == [
        tf_rule,  # the TF port's rule as it was
        {
            "from": [
                {"namespaceSelector": {}, "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}
            ],
            "ports": [{"port": 9464, "protocol": "TCP"}],
        },
    ]
    scrapers = [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}},
        {"ipBlock": {"cidr": "10.1.0.0/16"}},
    ]
    docs = render("metrics.port=9100", set_json=[f"metrics.scrapers={json.dumps(scrapers)}"], major=helm_major)
    assert training_policy(docs)["spec"]["ingress"][1] == {
        "from": scrapers,
        "ports": [{"port": 9100, "protocol": "TCP"}],
    }
    # no scraper named: no rule, so the policy admits nobody to the port
    assert training_policy(render(set_json=["metrics.scrapers=[]"], major=helm_major))["spec"]["ingress"] == [tf_rule]


def test_metrics_enabled_false_leaves_no_trace(helm_major):
    on, off = (
        render(major=helm_major),
        render("metrics.enabled=false", "metrics.podMonitor.enabled=false", api=True, major=helm_major),
    )
    assert not [d for d in off if d["kind"] in ("PodMonitor", "PrometheusRule")]
    for role, t in templates(off).items():
        assert not set(env(t)) & set(METRICS_ENV), role
        assert set(env(templates(on)[role])) - set(env(t)) == set(METRICS_ENV)
        assert all(p["name"] != "metrics" for p in container(t).get("ports", [])), role
        assert not [k for k in t["metadata"]["annotations"] if k.startswith("prometheus.io/")], role
    assert len(training_policy(off)["spec"]["ingress"]) == 1
    # beyond the launcher's own text (its ConfigMaps: launcher.py's, its package's), nothing mentions the exporter
    launchers = [d for d in off if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith(LAUNCHER_MAPS)]
    assert len(launchers) == 2
    rest = json.dumps([d for d in off if d not in launchers])
    for word in ("9464", "prometheus", "METRICS_PORT", '"metrics"'):
        assert word not in rest, word
