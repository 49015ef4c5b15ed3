"""Progress you can watch, on the real node: a real Prometheus scrapes every task's exporter and
evaluates the release's alerts.

Prometheus is Debian's 2.42 binary (`hack/node/build.sh` installs the package for promtool) run
as a pod of the cluster, labelled `app.kubernetes.io/name: prometheus` as the Prometheus Operator
labels its pods, so the chart's NetworkPolicy admits it as `metrics.scrapers`' default names. No
operator runs here: the PodMonitor and PrometheusRule CRDs (vendored, tooling/tf_cluster/crds/)
are applied so the chart's `auto` renders both objects and the API server checks them. The test
does the operator's part: each PodMonitor becomes a scrape job whose targets are the pods its
label selector picks, on their container port named as the endpoint says, labelled `namespace`,
`pod` and `container` (served to Prometheus by the test over HTTP service discovery, re-listed
at every refresh: Debian builds Prometheus without its Kubernetes discovery), and each
PrometheusRule's groups become a rule file, all read from the API server.

Three releases train at once beside it: a MultiWorkerMirrored example, a ParameterServer example
(chief coordinator, ps, workers) and a program that reports one epoch and then hangs while
training (`metrics.prometheusRule.stallMinutes: 1`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml
from needs import absent
from test_cluster import EX, KUBECONFIG, epochs, install, say, wait_for_log
from test_security import exec_in, probe_pod, running, wait_until

from tf_cluster import ROOT, TOOLS_BIN, kube, progress

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "hack"))  # the node harness, hack/node
from node import config as node_config  # noqa: E402

CRDS = Path(__file__).resolve().parents[3] / "tooling" / "tf_cluster" / "crds"
ARTIFACTS = Path(os.environ.get("TF_CLUSTER_ARTIFACTS", ROOT / "build" / "artifacts")) / "monitoring"
PROMETHEUS_BIN = Path("/usr/bin/prometheus")
KUBECTL = str(TOOLS_BIN / "kubectl")
FAST = ("metrics.podMonitor.interval=2s",)
STALL_PROGRAM = (  # one progress message (the protocol, progress.py), then silence while training
    "import json, time\n"
    f"print('{progress.PREFIX}PROGRESS ' + json.dumps({{'epoch': 1, 'epochs': 5, 'loss': 0.5}}), flush=True)\n"
    "time.sleep(100000)\n"
)
TCP = (
    "import json, socket, sys\n"
    "s = socket.socket(); s.settimeout(5)\n"
    "try:\n    s.connect((sys.argv[1], int(sys.argv[2]))); r = 'open'\n"
    "except socket.timeout:\n    r = 'timeout'\n"
    "except OSError as e:\n    r = type(e).__name__\n"
    "print(json.dumps({'tcp': r}))\n"
)


class Discovery:
    """Prometheus' HTTP service discovery for the PodMonitors of a namespace, answered from a live pod
    list: the targets the Prometheus Operator would scrape for each (GET /<monitor name>)."""

    def __init__(self, api, ns: str):
        import http.server
        import threading

        self.api, self.ns = api, ns
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                body = json.dumps(outer.targets(self.path.strip("/"))).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("0.0.0.0", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def targets(self, name: str) -> list[dict]:
        (monitor,) = [m for m in custom(self.api, self.ns, "podmonitors") if m["metadata"]["name"] == name]
        spec = monitor["spec"]
        assert set(spec["selector"]) == {"matchLabels"}, "only matchLabels selectors are followed here"
        (endpoint,) = spec["podMetricsEndpoints"]
        selector = ",".join(f"{k}={v}" for k, v in spec["selector"]["matchLabels"].items())
        groups = []
        for ns in spec["namespaceSelector"]["matchNames"]:
            for pod in core(self.api).list_namespaced_pod(ns, label_selector=selector).items:
                if not pod.status.pod_ip or pod.status.phase != "Running":
                    continue
                for c in pod.spec.containers:
                    for port in c.ports or []:
                        if port.name == endpoint["port"]:
                            labels = {"namespace": ns, "pod": pod.metadata.name, "container": c.name}
                            groups.append({"targets": [f"{pod.status.pod_ip}:{port.container_port}"], "labels": labels})
        return groups

    def scrape_config(self, monitor: dict, host: str) -> dict:
        (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
        name = monitor["metadata"]["name"]
        return {
            "job_name": f"podMonitor/{monitor['metadata']['namespace']}/{name}/0",
            "scrape_interval": endpoint["interval"],
            "metrics_path": endpoint["path"],
            "http_sd_configs": [
                {"url": f"http://{host}:{self.server.server_address[1]}/{name}", "refresh_interval": "3s"}
            ],
        }


def custom(api, ns: str, plural: str) -> list[dict]:
    from kubernetes import client

    return client.CustomObjectsApi(api).list_namespaced_custom_object("monitoring.coreos.com", "v1", ns, plural)[
        "items"
    ]


def start_prometheus(api, ns: str, image: str, discovery: Discovery) -> str:
    """The Prometheus pod, on the node whose host serves the discovery; returns its IP."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    monitors, rules = custom(api, ns, "podmonitors"), custom(api, ns, "prometheusrules")
    node = client.CoreV1Api(api).read_node(node_config.HOST_NODE.name)
    host = next(a.address for a in node.status.addresses if a.type == "InternalIP")
    config = {
        "global": {"scrape_interval": "2s", "evaluation_interval": "2s"},
        "rule_files": [f"/etc/prometheus/{r['metadata']['name']}.rules.yml" for r in rules],
        "scrape_configs": [discovery.scrape_config(m, host) for m in monitors],
    }
    data = {"prometheus.yml": yaml.safe_dump(config)}
    data |= {f"{r['metadata']['name']}.rules.yml": yaml.safe_dump({"groups": r["spec"]["groups"]}) for r in rules}
    core.create_namespaced_config_map(ns, {"metadata": {"name": "prometheus"}, "data": data})
    core.create_namespaced_pod(
        ns,
        {
            "metadata": {"name": "prometheus", "labels": {"app.kubernetes.io/name": "prometheus"}},
            "spec": {
                "automountServiceAccountToken": False,
                "nodeName": node_config.HOST_NODE.name,
                "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "fsGroup": 1000},
                "terminationGracePeriodSeconds": 0,
                "containers": [
                    {
                        "name": "prometheus",
                        "image": image,
                        "imagePullPolicy": "IfNotPresent",
                        "command": [
                            "/opt/prometheus/prometheus",
                            "--config.file=/etc/prometheus/prometheus.yml",
                            "--storage.tsdb.path=/prometheus",
                            "--web.listen-address=:9090",
                        ],
                        "volumeMounts": [
                            {"name": "bin", "mountPath": "/opt/prometheus/prometheus", "readOnly": True},
                            {"name": "config", "mountPath": "/etc/prometheus"},
                            {"name": "data", "mountPath": "/prometheus"},
                        ],
                        "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "1Gi"}},
                    }
                ],
                "volumes": [
                    {"name": "bin", "hostPath": {"path": str(PROMETHEUS_BIN), "type": "File"}},
                    {"name": "config", "configMap": {"name": "prometheus"}},
                    {"name": "data", "emptyDir": {}},
                ],
            },
        },
    )
    wait_until(lambda: running(api, ns, "prometheus"), "the Prometheus pod running", timeout=180)
    ip = core.read_namespaced_pod("prometheus", ns).status.pod_ip
    wait_until(lambda: ready(ip), "Prometheus answering /-/ready", timeout=120)
    return ip


def ready(ip: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://{ip}:9090/-/ready", timeout=3) as r:
            return r.status == 200
    except OSError:
        return False


def query(ip: str, promql: str, path: str = "query", **params) -> list[dict]:
    url = f"http://{ip}:9090/api/v1/{path}?" + urllib.parse.urlencode({"query": promql, **params})
    with urllib.request.urlopen(url, timeout=10) as r:
        body = json.load(r)
    assert body["status"] == "success", body
    return body["data"]["result"]


def task(series: dict) -> str:
    return f"{series['metric']['role']}-{series['metric']['index']}"


@pytest.fixture(scope="module")
def watched(kube_cluster, tmp_path_factory):
    """Three releases training in one namespace, and Prometheus scraping them from the start."""
    from pytest_helm_charts.k8s.namespace import ensure_namespace_exists

    if not PROMETHEUS_BIN.is_file():
        absent(f"Prometheus ({PROMETHEUS_BIN})", "hack/node/build.sh installs Debian's prometheus (make e2e)")
    api = kube.client_for(KUBECONFIG)
    files = [f"-f={CRDS / f'prometheus-operator-{kind}.yaml'}" for kind in ("podmonitors", "prometheusrules")]
    subprocess.run(
        [KUBECTL, "--kubeconfig", KUBECONFIG, "apply", "--server-side", *files], check=True, capture_output=True
    )
    wait_until(lambda: crd_served(api), "the monitoring.coreos.com/v1 API served", timeout=60)
    ns = f"e2e-monitoring-{int(time.time()) % 100000}"
    ensure_namespace_exists(kube_cluster.kube_client, ns)
    stall = tmp_path_factory.mktemp("monitoring") / "stall.yaml"
    stall.write_text(
        yaml.safe_dump(
            {
                "command": ["python3", "-c", STALL_PROGRAM],
                "roles": {"worker": {"replicas": 1}},
                "metrics": {"prometheusRule": {"stallMinutes": 1}},
            }
        )
    )
    t0 = time.monotonic()
    install(ns, "mw", EX / "mwms-cpu.yaml", sets=(*FAST, *epochs(24, 60)))  # outlasts Prometheus start
    # as long as mw: a cold CI run saw none of a shorter run's tasks in 600 s (done before its
    # first scrape, or never placed beside the other lane's releases: the failure now says which)
    install(ns, "ps", EX / "parameter-server.yaml", sets=(*FAST, *epochs(24, 60)))
    install(ns, "hang", EX / "mwms-cpu.yaml", stall, sets=FAST)
    worker = wait_for_log(api, ns, "mw", "-worker-", "0", r"task worker:0")
    image = next(c.image for c in core(api).read_namespaced_pod(worker, ns).spec.containers if c.name == "tensorflow")
    discovery = Discovery(api, ns)
    ip = start_prometheus(api, ns, image, discovery)
    say(f"Prometheus {ip} up {time.monotonic() - t0:.0f}s after the first install")
    yield api, ns, ip, t0
    discovery.server.shutdown()
    core(api).delete_collection_namespaced_pod(ns, grace_period_seconds=0)
    core(api).delete_namespace(ns)


def pod_states(api, ns: str) -> dict[str, str]:
    """Each pod's phase and, when it is not Running, why (what a failed scrape check says)."""
    out = {}
    for pod in core(api).list_namespaced_pod(ns).items:
        conditions = pod.status.conditions or []
        why = [f"{c.type}={c.status} {c.reason or ''}".strip() for c in conditions if c.status != "True"]
        out[pod.metadata.name] = pod.status.phase + (f" ({'; '.join(why)})" if why else "")
    return out


def core(api):
    from kubernetes import client

    return client.CoreV1Api(api)


def crd_served(api) -> bool:
    from kubernetes import client

    groups = client.ApisApi(api).get_api_versions().groups
    return any(g.name == "monitoring.coreos.com" for g in groups)


def test_prometheus_finds_every_task_of_both_strategies_with_epochs_rising_and_the_printed_loss(watched):
    api, ns, ip, t0 = watched
    expected = {"mw": {"worker-0", "worker-1"}}
    deadline = time.monotonic() + 600
    while True:
        states = query(ip, f'last_over_time(tf_cluster_task_state{{namespace="{ns}", state="training"}}[10m]) == 1')
        seen: dict[str, set[str]] = {}
        for s in states:
            seen.setdefault(s["metric"]["release"], set()).add(task(s))
        ps_tasks = seen.get("ps", set())
        if expected["mw"] <= seen.get("mw", set()) and {"chief-0", "ps-0", "worker-0"} <= ps_tasks:
            break
        assert time.monotonic() < deadline, f"not every task scraped: {seen}; pods: {pod_states(api, ns)}"
        time.sleep(3)
    say(f"scraped tasks {time.monotonic() - t0:.0f}s after install: {dict((k, sorted(v)) for k, v in seen.items())}")
    # both releases train to completion; Prometheus keeps their series
    wait_until(lambda: finished(api, ns, "mw") and finished(api, ns, "ps"), "mw and ps finished", timeout=900)
    end = time.time()
    for release, who in (("mw", "worker-0"), ("mw", "worker-1"), ("ps", "chief-0")):
        role, index = who.split("-")
        sel = f'namespace="{ns}", release="{release}", role="{role}", index="{index}"'
        epochs_seen = query(ip, f"tf_cluster_task_epoch{{{sel}}}", "query_range", start=end - 900, end=end, step=1)
        assert epochs_seen, f"{release}/{who}: no tf_cluster_task_epoch series"
        values = [float(v) for _, v in epochs_seen[0]["values"]]
        assert values == sorted(values) and values[-1] > values[0], f"{release}/{who}: epochs not rising: {values}"
        losses = query(ip, f"tf_cluster_task_loss{{{sel}}}", "query_range", start=end - 900, end=end, step=1)
        assert losses, f"{release}/{who}: no loss series"
        pod = pod_of(api, ns, release, role, index)
        printed = {
            int(m.data["epoch"]): float(m.data["loss"])
            for m in progress.scan(core(api).read_namespaced_pod_log(pod, ns, container="tensorflow"))
            if m.kind == "PROGRESS" and "epoch" in m.data and "loss" in m.data
        }
        at = {t: float(v) for t, v in losses[0]["values"]}
        pairs = {int(float(e)): at[t] for t, e in epochs_seen[0]["values"] if t in at}  # epoch -> loss, same instant
        assert pairs and printed, f"{release}/{who}: nothing to compare ({pairs}, {printed})"
        compared = [e for e in pairs if e in printed]
        assert compared, f"{release}/{who}: Prometheus saw epochs {sorted(pairs)}, the log printed {sorted(printed)}"
        for epoch, loss in pairs.items():
            if epoch in printed:
                assert loss == pytest.approx(printed[epoch], rel=1e-6), (
                    f"{release}/{who} epoch {epoch}: {loss} != {printed[epoch]}"
                )
        last = max(pairs)
        say(f"{release}/{who}: epochs {values[0]:.0f} -> {values[-1]:.0f}, loss at epoch {last} {pairs[last]}")
    plot(ip, ns, end)
    ps_tasks = {
        task(s) for s in query(ip, f'last_over_time(tf_cluster_task_state{{namespace="{ns}", release="ps"}}[15m])')
    }
    assert {"chief-0", "ps-0", "worker-0", "worker-1"} <= ps_tasks, ps_tasks


def plot(ip: str, ns: str, end: float) -> None:
    """The series Prometheus holds, drawn as the dashboard's panels draw them (docs/monitoring-series.png
    is one run's picture)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sel = f'{{namespace="{ns}"}}'
    panels = (
        (f"tf_cluster_task_epoch{sel}", "epoch"),
        (f"tf_cluster_task_loss{sel}", "loss"),
        (f"time() - tf_cluster_task_last_progress_timestamp_seconds{sel}", "seconds since the last progress"),
    )
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.4))
    data = [
        (ax, title, query(ip, expr, "query_range", start=end - 600, end=end, step=2))
        for ax, (expr, title) in zip(axes, panels, strict=True)
    ]
    t0 = min(float(t) for _, _, result in data for series in result for t, _ in series["values"])
    for ax, title, result in data:
        for series in sorted(result, key=lambda s: (s["metric"]["release"], task(s))):
            ax.plot(
                [float(t) - t0 for t, _ in series["values"]],
                [float(v) for _, v in series["values"]],
                label=f"{series['metric']['release']} {task(series)}",
            )
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("seconds after the first scrape", fontsize=8)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    fig.savefig(ARTIFACTS / "series.png", dpi=90)
    say(f"series drawn: {ARTIFACTS / 'series.png'}")


def finished(api, ns: str, release: str) -> bool:
    from kubernetes import client

    jobs = client.BatchV1Api(api).list_namespaced_job(ns, label_selector=f"app.kubernetes.io/instance={release}").items
    done = {"Complete", "Failed", "SuccessCriteriaMet"}
    return bool(jobs) and all(
        any(c.type in done and c.status == "True" for c in j.status.conditions or []) for j in jobs
    )


def pod_of(api, ns: str, release: str, role: str, index: str) -> str:
    pods = core(api).list_namespaced_pod(ns, label_selector=f"app.kubernetes.io/instance={release}").items
    names = [
        p.metadata.name
        for p in pods
        if f"-{role}-" in p.metadata.name
        and p.metadata.annotations.get("batch.kubernetes.io/job-completion-index") == index
    ]
    assert names, f"no pod of {release} {role}-{index}"
    return sorted(names)[-1]


def test_a_run_that_stops_making_progress_fires_the_stall_alert_and_a_healthy_one_none(watched):
    api, ns, ip, t0 = watched
    deadline = time.monotonic() + 420
    while True:
        firing = query(ip, f'ALERTS{{namespace="{ns}", alertstate="firing"}}')
        names = {(a["metric"]["alertname"], a["metric"].get("release")) for a in firing}
        if ("TFClusterTrainingStalled", "hang") in names:
            break
        assert time.monotonic() < deadline, f"the stall alert did not fire within 7 min: {names}"
        time.sleep(5)
    say(f"TFClusterTrainingStalled fired for hang {time.monotonic() - t0:.0f}s after install (stallMinutes 1, for 1m)")
    healthy = {(n, r) for n, r in names if r in ("mw", "ps")}
    assert healthy == set(), f"healthy releases fired alerts: {healthy}"


def test_only_the_named_scraper_reaches_the_metrics_port(watched):
    """Probes as workloads: Prometheus itself (labelled as metrics.scrapers names) scrapes every target
    (`up` is 1); a pod of the same namespace without that label gets a timeout on the same port."""
    api, ns, ip, t0 = watched
    ups = query(ip, f'up{{namespace="{ns}"}}')
    assert ups and all(u["value"][1] == "1" for u in ups if u["metric"].get("pod", "").startswith("hang-")), ups
    hang_pod = pod_of(api, ns, "hang", "worker", "0")
    target = core(api).read_namespaced_pod(hang_pod, ns).status.pod_ip
    image = next(c.image for c in core(api).read_namespaced_pod(hang_pod, ns).spec.containers if c.name == "tensorflow")
    probe_pod(api, ns, "outsider", image)
    probe_pod(api, ns, "scraper", image, {"app.kubernetes.io/name": "prometheus"})
    for name in ("outsider", "scraper"):
        wait_until(lambda name=name: running(api, ns, name), f"probe {name} running")
    got = {name: exec_in(ns, name, TCP, target, "9464")["tcp"] for name in ("outsider", "scraper")}
    say(f"metrics port {target}:9464: {got}")
    assert got == {"outsider": "timeout", "scraper": "open"}, got
