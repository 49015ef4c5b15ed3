"""The Grafana dashboard (charts/tf-cluster/files/grafana-dashboard.json): a dashboard's shape as
Grafana's JSON model has it, panels that read only the series the tasks export, scoped by the
dashboard's namespace and release variables, and the ConfigMap Grafana's sidecar loads."""

from __future__ import annotations

import json
import re

import pytest

import promql
from tf_cluster import CHART

DASHBOARD = CHART / "files" / "grafana-dashboard.json"
GRID_COLUMNS = 24  # Grafana's grid
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
SCOPE = ('namespace="$namespace"', 'release="$release"')


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def panels() -> list[dict]:
    return dashboard()["panels"]


def test_it_is_a_dashboard():
    d = dashboard()
    assert re.fullmatch(r"[a-zA-Z0-9_-]{1,40}", d["uid"]), "Grafana's uid: at most 40 characters"
    assert d["title"]
    assert isinstance(d["schemaVersion"], int) and d["schemaVersion"] >= 41, "the current JSON model"
    assert d["time"] == {"from": "now-1h", "to": "now"}
    assert "id" not in d, "an id is the Grafana instance's, not the file's"
    ids = [p["id"] for p in panels()]
    assert len(ids) == len(set(ids)), "panel ids are unique"


@pytest.mark.parametrize("panel", panels(), ids=lambda p: p["title"])
def test_each_panel_queries_prometheus(panel):
    assert panel["type"] in {"timeseries", "stat", "state-timeline"}
    assert panel["datasource"] == DATASOURCE
    grid = panel["gridPos"]
    assert grid["w"] > 0 and grid["h"] > 0 and grid["x"] + grid["w"] <= GRID_COLUMNS
    assert panel["targets"]
    assert [t["refId"] for t in panel["targets"]] == [chr(ord("A") + i) for i in range(len(panel["targets"]))]
    for target in panel["targets"]:
        assert target["datasource"] == DATASOURCE
        assert target["expr"]


def test_panels_do_not_overlap():
    taken: set[tuple[int, int]] = set()
    for p in panels():
        g = p["gridPos"]
        cells = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & taken, p["title"]
        taken |= cells


def test_every_query_reads_only_exported_series_of_the_chosen_release():
    read: set[str] = set()
    for p in panels():
        for target in p["targets"]:
            names = promql.metric_names(target["expr"])
            assert names and names <= promql.EXPORTED, (p["title"], target["expr"], names - promql.EXPORTED)
            for name in names:
                for selector in re.findall(rf"\b{name}\{{([^}}]*)\}}", target["expr"]):
                    assert all(s in selector for s in SCOPE), (p["title"], target["expr"])
            read |= names
    shown = {"epoch", "loss", "metric", "steps_per_second", "state", "peer_wait_seconds", "index_failures"}
    assert {f"tf_cluster_task_{m}" for m in shown} <= read


def test_templating_chooses_the_data_source_namespace_and_release():
    variables = {v["name"]: v for v in dashboard()["templating"]["list"]}
    assert set(variables) == {"datasource", "namespace", "release"}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for name in ("namespace", "release"):
        v = variables[name]
        assert v["type"] == "query" and v["datasource"] == DATASOURCE
        m = re.fullmatch(r"label_values\((\w+)(\{[^}]*\})?, (\w+)\)", v["query"]["query"])
        assert m and m.group(1) in promql.EXPORTED and m.group(3) == name, v["query"]
    assert 'namespace="$namespace"' in variables["release"]["query"]["query"]


def test_the_configmap_carries_the_dashboard_with_the_sidecars_label():
    def dashboards(text: str) -> list[dict]:
        return [c for c in promql.kinds(text, "ConfigMap") if c["metadata"]["name"].endswith("-dashboard")]

    assert dashboards(promql.render()) == [], "off by default, with the API served or not"
    (cm,) = dashboards(promql.render(("metrics.dashboard.enabled=true", "metrics.dashboard.labels.team=ml"), api=False))
    assert cm["metadata"]["name"] == f"{promql.RELEASE}-tf-cluster-dashboard"
    labels = cm["metadata"]["labels"]
    assert labels["grafana_dashboard"] == "1" and labels["team"] == "ml"
    assert labels["app.kubernetes.io/instance"] == promql.RELEASE
    assert json.loads(cm["data"]["tf-cluster-training.json"]) == dashboard()
    assert cm["data"]["tf-cluster-training.json"] == DASHBOARD.read_text().strip()
