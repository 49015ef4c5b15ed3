"""Against a real kube-apiserver (built from the Kubernetes Go modules) and etcd.

No kubelet, scheduler or controller-manager here: these tests prove what an API
server alone can: the chart installs, upgrades and uninstalls for real under
Helm 4 and Helm 3 (server-side validation of every object), its RBAC lets a
stopping role read the leading Job and nothing else, and the launcher's
Kubernetes-API path stops a task when that Job completes or fails. Running pods
are the cluster e2e's job (issue 5).

Binaries: hack/apiserver/build.sh (make e2e-api runs it).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from tf_cluster import CHART, ROOT, cluster_state, helm, kube, manifests

sys.path.insert(0, str(ROOT / "hack"))
from node.pki import loopback_apiserver_pki, token_kubeconfig  # noqa: E402

K8S_VERSION = os.environ.get("K8S_VERSION", "1.29.15")  # oldest supported (Makefile K8S_API_VERSION; CI: the node's)
BIN = Path(
    os.environ.get(
        "TF_CLUSTER_K8S_BIN",
        Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tf-cluster" / f"k8s-{K8S_VERSION}",
    )
)
APISERVER = BIN / "kube-apiserver"
LAUNCHER = CHART / "files" / "launcher.py"  # its package beside it: tf_cluster_launcher/
PS_EXAMPLE = ROOT / "values-examples" / "parameter-server.yaml"

pytestmark = pytest.mark.needs(
    f"kube-apiserver ({BIN}), etcd or openssl",
    bool(APISERVER.exists() and shutil.which("etcd") and shutil.which("openssl")),
    "run `make e2e-api` (builds them)",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def apiserver(tmp_path_factory):
    w = tmp_path_factory.mktemp("apiserver")
    loopback_apiserver_pki(w, "tf-cluster-e2e-ca", 1, "e2e-admin-token")
    etcd_port, peer_port, port = free_port(), free_port(), free_port()
    procs = [
        subprocess.Popen(
            [
                "etcd",
                "--data-dir",
                str(w / "etcd"),
                "--listen-client-urls",
                f"http://127.0.0.1:{etcd_port}",
                "--advertise-client-urls",
                f"http://127.0.0.1:{etcd_port}",
                "--listen-peer-urls",
                f"http://127.0.0.1:{peer_port}",
            ],
            stdout=open(w / "etcd.log", "w"),
            stderr=subprocess.STDOUT,
        )
    ]
    procs.append(
        subprocess.Popen(
            [
                str(APISERVER),
                f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--tls-cert-file={w / 'srv.crt'}",
                f"--tls-private-key-file={w / 'srv.key'}",
                f"--client-ca-file={w / 'ca.crt'}",
                f"--token-auth-file={w / 'tokens.csv'}",
                "--authorization-mode=RBAC",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={w / 'sa.pub'}",
                f"--service-account-signing-key-file={w / 'sa.key'}",
                "--service-cluster-ip-range=10.96.0.0/16",
            ],
            stdout=open(w / "apiserver.log", "w"),
            stderr=subprocess.STDOUT,
        )
    )
    kubeconfig = token_kubeconfig(w / "kubeconfig", f"https://127.0.0.1:{port}", w / "ca.crt", "e2e-admin-token", "e2e")
    from kubernetes import client, config

    deadline = time.monotonic() + 90
    while True:
        try:
            api = config.new_client_from_config(str(kubeconfig))
            client.VersionApi(api).get_code()
            break
        except Exception:  # noqa: BLE001 - any error means "not ready yet" until the deadline
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                pytest.fail("kube-apiserver did not become ready:\n" + (w / "apiserver.log").read_text()[-3000:])
            time.sleep(1)
    yield {"dir": w, "kubeconfig": kubeconfig, "api": api, "port": port}
    for p in reversed(procs):
        p.terminate()
        p.wait(30)


@pytest.fixture
def namespace(apiserver, request):
    import hashlib

    from kubernetes import client

    digest = hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:6]
    name = (
        "e2e-"
        + request.node.name.lower().replace("_", "-").replace("[", "-").replace("]", "")[:30].strip("-")
        + "-"
        + digest
    )
    client.CoreV1Api(apiserver["api"]).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    return name


def helm_in(apiserver, major: str, namespace: str) -> helm.Helm:
    return helm.Helm(major, kubeconfig=apiserver["kubeconfig"], namespace=namespace)


def job_names(api, namespace):
    from kubernetes import client

    return sorted(j.metadata.name for j in client.BatchV1Api(api).list_namespaced_job(namespace).items)


@pytest.mark.parametrize("major", ["4", "3"], ids=["helm4", "helm3"])
def test_install_upgrade_uninstall(apiserver, namespace, major):
    api = apiserver["api"]
    rel = "ps"
    h, values = helm_in(apiserver, major, namespace), helm.Values.of([PS_EXAMPLE])
    r = h.install(rel, values)
    assert r.returncode == 0, r.stderr
    first = job_names(api, namespace)
    assert [n.rsplit("-", 1)[0] for n in first] == ["ps-tf-cluster-chief", "ps-tf-cluster-ps", "ps-tf-cluster-worker"]
    # unchanged values: same Jobs
    assert h.upgrade(rel, values).returncode == 0
    assert job_names(api, namespace) == first
    # changed training spec: a new run, no immutable-field error, the old run's Jobs gone
    r = h.upgrade(rel, values.plus(helm.Values(set_string=("env[0].name=EPOCHS,env[0].value=9",))))
    assert r.returncode == 0, r.stderr
    second = job_names(api, namespace)
    assert len(second) == 3 and set(second).isdisjoint(first)
    r = h.uninstall(rel)
    assert r.returncode == 0, r.stderr
    # no controller-manager here: a deleted claim stays Terminating (pvc-protection), so it counts as gone
    assert kube.release_objects(api, namespace, rel, count_terminating=False) == []


def test_fixed_job_names_show_why_runs_are_hashed(apiserver, namespace):
    """With run.suffix=none, changing the pod template is an immutable-field error, as documented."""
    h, base = helm_in(apiserver, "4", namespace), helm.Values.of([PS_EXAMPLE], set=["run.suffix=none"])
    assert h.install("fixed", base).returncode == 0
    r = h.upgrade("fixed", base.plus(helm.Values(set_string=("env[0].value=9",))))
    assert r.returncode != 0 and "immutable" in r.stderr


def token_for(apiserver, namespace, sa, tmp_path) -> Path:
    from kubernetes import client

    tr = client.CoreV1Api(apiserver["api"]).create_namespaced_service_account_token(
        sa, namespace, client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[]))
    )
    sa_dir = tmp_path / "sa"
    sa_dir.mkdir()
    (sa_dir / "token").write_text(tr.status.token)
    shutil.copy(apiserver["dir"] / "ca.crt", sa_dir / "ca.crt")
    return sa_dir


def finish(api, namespace, job, outcome):
    from kubernetes import client

    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    cond = lambda t: {"type": t, "status": "True", "lastProbeTime": now, "lastTransitionTime": now}  # noqa: E731
    if outcome == "Complete":
        status = {
            "startTime": now,
            "completionTime": now,
            "succeeded": 1,
            "completedIndexes": "0",
            "conditions": [cond("SuccessCriteriaMet"), cond("Complete")],
        }
    else:
        status = {
            "startTime": now,
            "failed": 1,
            "failedIndexes": "0",
            "conditions": [cond("FailureTarget"), cond("Failed")],
        }
    client.BatchV1Api(api).patch_namespaced_job_status(job, namespace, {"status": status})


@pytest.mark.parametrize("outcome,rc", [("Complete", 0), ("Failed", 3)])
def test_launcher_stops_a_server_through_the_api_when_the_chief_job_ends(apiserver, namespace, tmp_path, outcome, rc):
    api = apiserver["api"]
    from kubernetes import client, utils

    docs = helm.parse(helm.template([PS_EXAMPLE], release="tf", namespace=namespace))
    for doc in docs:
        if doc["kind"] != "Pod":  # the helm-test Pod is a hook
            utils.create_from_dict(api, doc, namespace=namespace)
    chief = next(d["metadata"]["name"] for d in docs if d["kind"] == "Job" and "-chief-" in d["metadata"]["name"])
    ps_job = next(d for d in docs if d["kind"] == "Job" and "-ps-" in d["metadata"]["name"])
    ps_env = manifests.resolve_env(  # the run's environment (envFrom) and the pod's own
        ps_job["spec"]["template"]["spec"]["containers"][0],
        index=0,
        namespace=namespace,
        node_cpus=1,
        config_maps=manifests.config_maps(docs),
    )
    assert ps_env["TF_CLUSTER_LEADER_JOB"] == chief and ps_env["TF_CLUSTER_STOP_WITH_LEADER"] == "true"
    sa_dir = token_for(apiserver, namespace, "tf-tf-cluster", tmp_path)

    # The chart's Role: this token reads the chief Job and nothing else.
    cfg = client.Configuration(host=f"https://127.0.0.1:{apiserver['port']}")
    cfg.ssl_ca_cert = str(sa_dir / "ca.crt")
    cfg.api_key = {"authorization": "Bearer " + (sa_dir / "token").read_text()}
    limited = client.ApiClient(cfg)
    assert client.BatchV1Api(limited).read_namespaced_job(chief, namespace).metadata.name == chief
    # ... and watches it (a list or watch naming it with fieldSelector metadata.name is a request for it)
    named = client.BatchV1Api(limited).list_namespaced_job(namespace, field_selector=f"metadata.name={chief}")
    assert [j.metadata.name for j in named.items] == [chief]
    with pytest.raises(client.ApiException) as e:
        client.BatchV1Api(limited).list_namespaced_job(namespace)
    assert e.value.status == 403

    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("TF_CONFIG")},
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": str(apiserver["port"]),
        "TF_CLUSTER_SA_DIR": str(sa_dir),
        "TF_CLUSTER_NAMESPACE": namespace,
        "TF_CLUSTER_LEADER_JOB": chief,
        "TF_CLUSTER_STOP_WITH_LEADER": "true",
        "TF_CLUSTER_POLL_SECONDS": "1",
        "TF_CLUSTER_ROLE": "ps",
        "TF_TASK_INDEX": "0",
    }
    proc = subprocess.Popen(
        [
            sys.executable,
            str(LAUNCHER),
            "--",
            sys.executable,
            "-c",
            "import time; print('serving', flush=True); time.sleep(600)",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "serving"
    time.sleep(3)
    assert proc.poll() is None, "a ps must keep serving while the chief runs"
    t0 = time.monotonic()
    finish(api, namespace, chief, outcome)
    _, err = proc.communicate(timeout=60)
    stopped_after = time.monotonic() - t0
    assert proc.returncode == rc, err
    assert stopped_after < 5, f"stopped {stopped_after:.1f}s after the Job ended (watched)"
    assert f"Job {chief} is {outcome}" in err
    assert f"will stop when Job {chief} finishes (watched)" in err, err


def ps_launcher(apiserver, namespace, tmp_path, sa: str, agent: bool = False, **extra) -> tuple[subprocess.Popen, str]:
    """The parameter-server example's objects created, and the launcher of its ps started as its Job
    would start it, with `sa`'s token; the ps serves until stopped. Returns it and the chief Job.
    With `agent`, as the chart's pod runs it: the token only in the agent (`--agent`, the
    tf-cluster-agent sidecar), which tells the ps's launcher through a folder; it stops with the ps."""
    from kubernetes import utils

    docs = helm.parse(helm.template([PS_EXAMPLE], release="tf", namespace=namespace))
    for doc in docs:
        if doc["kind"] != "Pod":  # the helm-test Pod is a hook
            utils.create_from_dict(apiserver["api"], doc, namespace=namespace)
    chief = next(d["metadata"]["name"] for d in docs if d["kind"] == "Job" and "-chief-" in d["metadata"]["name"])
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("TF_")},
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": str(apiserver["port"]),
        "TF_CLUSTER_SA_DIR": str(token_for(apiserver, namespace, sa, tmp_path)),
        "TF_CLUSTER_NAMESPACE": namespace,
        "TF_CLUSTER_LEADER_JOB": chief,
        "TF_CLUSTER_STOP_WITH_LEADER": "true",
        "TF_CLUSTER_ROLE": "ps",
        "TF_TASK_INDEX": "0",
        **extra,
    }
    serve = "import time; print('serving', flush=True); time.sleep(600)"
    argv = [sys.executable, str(LAUNCHER), "--", sys.executable, "-c", serve]
    if not agent:
        return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), chief
    env["TF_CLUSTER_AGENT_DIR"] = str(tmp_path / "agent")
    (tmp_path / "agent").mkdir()
    agent_log = (tmp_path / "agent.log").open("w")
    sidecar = subprocess.Popen([sys.executable, str(LAUNCHER), "--agent"], env=env, stdout=agent_log, stderr=agent_log)
    (tmp_path / "no-token").mkdir()
    env["TF_CLUSTER_SA_DIR"] = str(tmp_path / "no-token")
    task = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def stop_the_agent_with_the_task() -> None:  # the kubelet stops a native sidecar after the pod's container
        task.wait()
        sidecar.terminate()

    threading.Thread(target=stop_the_agent_with_the_task, daemon=True).start()
    return task, chief


def test_a_server_whose_leading_job_is_deleted_before_it_finished_stops_and_fails(apiserver, namespace, tmp_path):
    """Issue 43: with its leading Job deleted mid-run (kubectl delete job), a ps watched a Job that
    would never finish and served forever. Absent for TF_CLUSTER_LEADER_MISSING_SECONDS (60 in
    pods, 3 here), it ends with exit 3, as when the Job fails."""
    from kubernetes import client

    proc, chief = ps_launcher(apiserver, namespace, tmp_path, "tf-tf-cluster", TF_CLUSTER_LEADER_MISSING_SECONDS="3")
    assert proc.stdout.readline().strip() == "serving"
    time.sleep(2)
    assert proc.poll() is None, "a ps serves while the chief runs"
    t0 = time.monotonic()
    client.BatchV1Api(apiserver["api"]).delete_namespaced_job(chief, namespace, propagation_policy="Background")
    _, err = proc.communicate(timeout=60)
    took = time.monotonic() - t0
    assert proc.returncode == 3, err
    assert f"Job {chief} was deleted before it finished (no Job of that name for 3s)" in err, err
    assert f"Job {chief} no longer exists; task stopped (exit 3" in err, err
    assert 3 <= took < 10, f"stopped {took:.1f}s after the deletion"


def test_a_server_that_may_not_read_its_leading_job_fails_at_once_naming_the_role(apiserver, namespace, tmp_path):
    """Issue 43: a ServiceAccount without the chart's Role (rbac.create=false, a platform's own
    account) left every ps unable to watch the chief: it said so once and served forever, and the
    release never ended. It now exits 5 before starting its program, naming what to grant."""
    from kubernetes import client

    client.CoreV1Api(apiserver["api"]).create_namespaced_service_account(namespace, {"metadata": {"name": "plain"}})
    t0 = time.monotonic()
    proc, chief = ps_launcher(apiserver, namespace, tmp_path, "plain")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 5, err
    assert "serving" not in out
    assert f"cannot read Job {chief} (403 Forbidden)" in err and "rbac.create=true" in err, err
    assert time.monotonic() - t0 < 10


class Task:
    """One task's real launcher, started as the chart would start it (its Job's environment, the
    release's service account token) against this API server, `print('trained')` as its program."""

    def __init__(
        self, apiserver, namespace, tmp_path, docs: list[dict], job: dict, index: int, sa: str, timeout: int = 25
    ):
        pod_spec = job["spec"]["template"]["spec"]
        resolved = manifests.resolve_env(
            pod_spec["containers"][0],
            index=index,
            namespace=namespace,
            node_cpus=1,
            config_maps=manifests.config_maps(docs),
        )
        downward = {e["name"] for e in pod_spec["containers"][0]["env"] if "valueFrom" in e}
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("TF_")},
            # as the kubelet gives them, but the downward API's (no pod object here)
            **{k: v for k, v in resolved.items() if k.startswith("TF_") and k not in downward},
            "TF_TASK_INDEX": str(index),
            "TF_CLUSTER_NAMESPACE": namespace,
            "TF_CLUSTER_PEER_TIMEOUT": str(timeout),
            "TF_CLUSTER_FENCE_SECONDS": "0",
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(apiserver["port"]),
            "TF_CLUSTER_SA_DIR": str(token_for(apiserver, namespace, sa, tmp_path)),
        }
        env.pop("TF_CLUSTER_METRICS_PORT", None)
        # the launcher with the token in one process: the code the pod's tf-cluster-agent runs
        # (test_a_server_stopped_with_its_leader_records_it_as_an_event_on_its_pod: the two apart)
        env.pop("TF_CLUSTER_AGENT_DIR", None)
        self.proc = subprocess.Popen(
            [sys.executable, str(LAUNCHER), "--", sys.executable, "-c", "print('trained')"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[tuple[float, str]] = []

    def until(self, text: str, timeout: float = 15) -> float:
        """When the launcher logged `text` (monotonic); fails with its log if it did not in time."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.lines.append((time.monotonic(), line))
            if text in line:
                return time.monotonic()
        raise AssertionError(f"no {text!r} in the launcher's log:\n" + "".join(t for _, t in self.lines))

    def finish(self) -> str:
        _, rest = self.proc.communicate(timeout=60)
        return "".join(t for _, t in self.lines) + rest


def test_a_worker_waits_for_the_leaders_pod_through_a_watch_before_any_dns_lookup(apiserver, namespace, tmp_path):
    """MultiWorkerMirrored worker 1 waits for the coordination leader (worker 0) alone: its pod is
    watched (none yet, then no IP, then an IP) and only then is its name looked up. Here no DNS
    answers for it (no CoreDNS in this suite), which the launcher says, naming the peer, and gives up
    at its peer timeout (exit 4). The real node shows the names resolving (tests/e2e/cluster)."""
    api = apiserver["api"]
    from kubernetes import client, utils

    docs = helm.parse(helm.template([ROOT / "values-examples" / "mwms-cpu.yaml"], release="mw", namespace=namespace))
    for doc in docs:
        if doc["kind"] != "Pod":
            utils.create_from_dict(api, doc, namespace=namespace)
    (job,) = [d for d in docs if d["kind"] == "Job" and "-worker-" in d["metadata"]["name"]]
    pod_spec = job["spec"]["template"]["spec"]
    leader = f"{job['metadata']['name']}-0"
    task = Task(apiserver, namespace, tmp_path, docs, job, 1, "mw-tf-cluster")
    task.until(f"{leader}.mw-tf-cluster (no pod yet)")
    core = client.CoreV1Api(api)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{leader}-abcde",
            "labels": {
                **job["spec"]["template"]["metadata"]["labels"],
                "batch.kubernetes.io/job-name": job["metadata"]["name"],
                "batch.kubernetes.io/job-completion-index": "0",
            },
        },
        "spec": {
            "hostname": leader,
            "subdomain": pod_spec["subdomain"],
            "nodeName": "node-a",
            "serviceAccountName": "mw-tf-cluster",  # no controller-manager here: no `default` account
            "automountServiceAccountToken": False,
            "containers": [{"name": "tensorflow", "image": "tf-cluster-trainer:test"}],
        },
    }
    core.create_namespaced_pod(namespace, pod)
    task.until("on node node-a, no IP yet")
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    core.patch_namespaced_pod_status(
        pod["metadata"]["name"],
        namespace,
        {"status": {"phase": "Running", "podIP": "10.244.0.7", "podIPs": [{"ip": "10.244.0.7"}], "startTime": now}},
    )
    t_ip = time.monotonic()
    # then its name is asked for as private-use record types (never cached for A/AAAA), for up to 10 s
    t_seen = task.until("have an IP but DNS does not answer for them yet", timeout=20)
    assert t_seen - t_ip < 15, f"the launcher moved on {t_seen - t_ip:.1f}s after the pod's IP was set"
    err = task.finish()
    assert task.proc.returncode == 4, err
    assert f"peer(s) never resolved: {leader}.mw-tf-cluster" in err, err
    assert "trained" not in err


def test_the_parameter_server_chief_learns_its_peers_from_the_services_endpointslices(apiserver, namespace, tmp_path):
    """The ParameterServer chief waits for every peer: through the headless Service's
    EndpointSlices (what CoreDNS serves from; a few hundred bytes an address where a pod carries
    TF_CONFIG), with the chart's Role. A missing peer is explained from its own pod (one request).
    Here no controller manager writes the slices: the test writes them as it would."""
    api = apiserver["api"]
    from kubernetes import client, utils

    docs = helm.parse(helm.template([PS_EXAMPLE], release="pe", namespace=namespace))
    for doc in docs:
        if doc["kind"] != "Pod":
            utils.create_from_dict(api, doc, namespace=namespace)
    jobs = {d["metadata"]["name"].split("-")[-2]: d for d in docs if d["kind"] == "Job"}
    service = next(d["metadata"]["name"] for d in docs if d["kind"] == "Service")
    peers = [
        f"{jobs[r]['metadata']['name']}-{i}" for r, n in (("chief", 1), ("worker", 2), ("ps", 1)) for i in range(n)
    ]
    task = Task(apiserver, namespace, tmp_path, docs, jobs["chief"], 0, "pe-tf-cluster")
    task.until(f"waiting for {len(peers)}/{len(peers)} peer pod(s)")
    task.until(f"{peers[0]}.{service} (no pod yet)")

    def endpoint(host: str, i: int) -> dict:
        return {"addresses": [f"10.244.0.{10 + i}"], "hostname": host, "conditions": {"ready": True}}

    discovery = client.DiscoveryV1Api(api)
    body = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": f"{service}-abcde", "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "ports": [{"name": "grpc", "port": 2222, "protocol": "TCP"}],
        "endpoints": [endpoint(h, i) for i, h in enumerate(peers[:-1])],
    }
    discovery.create_namespaced_endpoint_slice(namespace, body)
    task.until(f"waiting for 1/{len(peers)} peer pod(s)")
    body["endpoints"].append(endpoint(peers[-1], len(peers)))
    discovery.replace_namespaced_endpoint_slice(body["metadata"]["name"], namespace, body)
    task.until("have an IP but DNS does not answer for them yet", timeout=20)
    err = task.finish()
    assert task.proc.returncode == 4, err
    assert "cannot watch" not in err and "waiting on DNS instead" not in err, err


def job_uids(api, namespace):
    from kubernetes import client

    return {j.metadata.name: j.metadata.uid for j in client.BatchV1Api(api).list_namespaced_job(namespace).items}


@pytest.mark.parametrize("major", ["4", "3"], ids=["helm4", "helm3"])
def test_changing_the_service_account_is_a_new_run_not_an_immutable_field_error(apiserver, namespace, major):
    h, values = helm_in(apiserver, major, namespace), helm.Values.of([PS_EXAMPLE])
    assert h.install("sa", values).returncode == 0
    first = job_uids(apiserver["api"], namespace)
    r = h.upgrade("sa", values.plus(helm.Values(set=("serviceAccount.name=trainer",))))
    assert r.returncode == 0, r.stderr
    assert set(job_uids(apiserver["api"], namespace)).isdisjoint(first)


@pytest.mark.parametrize("major", ["4", "3"], ids=["helm4", "helm3"])
def test_a_chart_version_bump_keeps_the_running_jobs(apiserver, namespace, major, tmp_path):
    bumped = tmp_path / "tf-cluster"
    shutil.copytree(CHART, bumped)
    text = (bumped / "Chart.yaml").read_text()
    (bumped / "Chart.yaml").write_text(re.sub(r"(?m)^version: .*$", "version: 99.0.0", text))
    h, values = helm_in(apiserver, major, namespace), helm.Values.of([PS_EXAMPLE])
    assert h.install("bump", values).returncode == 0
    first = job_uids(apiserver["api"], namespace)
    r = h.upgrade("bump", values, chart=bumped)
    assert r.returncode == 0, r.stderr
    assert job_uids(apiserver["api"], namespace) == first  # same Job objects: the training was not touched


def test_on_the_oldest_supported_api_server_a_release_installs_without_gang_objects(apiserver, namespace):
    """scheduling.gang=auto on a server without scheduling.k8s.io/v1beta1 (1.29, which has no such
    API; or 1.37, as in CI, where this suite leaves the beta API off): Helm sees the served APIs,
    renders no PodGroup, and the Jobs' pods join none."""
    from kubernetes import client

    api = apiserver["api"]
    groups = client.ApisApi(api).get_api_versions().groups
    scheduling = [v.version for g in groups if g.name == "scheduling.k8s.io" for v in g.versions]
    version = client.VersionApi(api).get_code().git_version
    h = helm_in(apiserver, "4", namespace)
    r = h.install("old", helm.Values.of([PS_EXAMPLE]))
    assert r.returncode == 0, r.stderr
    manifest = h.run("get", "manifest", "old").stdout
    assert "kind: PodGroup" not in manifest and "schedulingGroup" not in manifest
    jobs = client.BatchV1Api(api).list_namespaced_job(namespace).items
    assert len(jobs) == 3 and all(j.spec.template.spec.scheduling_group is None for j in jobs)
    print(f"Kubernetes {version}: scheduling.k8s.io {scheduling}; installed {len(jobs)} Jobs and no PodGroup")


# ------------------------------------------------------------ tf-cluster status of an installed release
def tf_cluster(*argv, process: bool = False) -> subprocess.CompletedProcess:
    """The `tf-cluster` command: its main() here (a new interpreter costs seconds on a busy
    machine), or as a user runs it (`process`)."""
    import contextlib
    import io

    from tf_cluster import cli

    args = [str(a) for a in argv]
    if process:
        return subprocess.run([sys.executable, "-m", "tf_cluster.cli", *args], capture_output=True, text=True)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(args)
    return subprocess.CompletedProcess(args, rc, out.getvalue(), err.getvalue())


def test_the_same_mistake_gives_the_same_exit_code_on_a_cluster(apiserver, namespace, tmp_path):
    """docs/reference/exit-codes.md: values the chart refuses exit 4 from `install` and `upgrade` as
    from `render` (Helm refused them after reaching the cluster); `uninstall` of a release not there
    exits 2 as `status` does; no traceback, nothing installed."""
    where = ["--kubeconfig", apiserver["kubeconfig"], "-n", namespace, "--wait", "none"]
    example = ["-f", ROOT / "values-examples" / "mwms-cpu.yaml", "-f", no_claims_values(tmp_path)]
    r = tf_cluster("install", "ok", *example, *where)
    assert r.returncode == 0, r.stdout + r.stderr
    for verb, release in (("install", "bad"), ("upgrade", "ok")):
        r = tf_cluster(verb, release, *example, "--set", "nope=1", *where)
        assert r.returncode == 4, r.stdout + r.stderr
        assert "values refused by the chart's schema" in r.stderr and "'nope'" in r.stderr, r.stderr
        assert "FAILED" not in r.stderr and "Traceback" not in r.stderr, r.stderr
    releases = helm_in(apiserver, "4", namespace).releases()
    assert releases == ["ok"], releases
    assert "revision: 1" in helm_in(apiserver, "4", namespace).run("status", "ok").stdout.lower()
    r = tf_cluster("uninstall", "nope", *where[:4])
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"no release nope in namespace {namespace}: helm list -n {namespace}" in r.stderr, r.stderr


def job_pod(api, namespace: str, job, index: int, suffix: str, *, node=None, failures=0) -> str:
    """A pod of an Indexed Job as its controller makes it (no controller-manager here): the Job's
    template with the Job's labels, the completion index and the index's failure count."""
    from kubernetes import client

    tmpl = api.sanitize_for_serialization(job.spec.template)
    meta, name = tmpl.get("metadata", {}), job.metadata.name
    labels = {**meta.get("labels", {}), cluster_state.JOB_NAME_LABEL: name, cluster_state.INDEX_LABEL: str(index)}
    labels["batch.kubernetes.io/controller-uid"] = job.metadata.uid
    notes = {
        **meta.get("annotations", {}),
        cluster_state.INDEX_LABEL: str(index),
        cluster_state.FAILURE_COUNT: str(failures),
    }
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": job.metadata.uid, "controller": True}
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{name}-{index}-{suffix}",
            "labels": labels,
            "annotations": notes,
            "ownerReferences": [owner],
        },
        "spec": {**tmpl["spec"], **({"nodeName": node} if node else {})},
    }
    return client.CoreV1Api(api).create_namespaced_pod(namespace, body).metadata.name


def pod_status(api, namespace: str, name: str, **status) -> None:
    """What a scheduler or a kubelet would write."""
    from kubernetes import client

    client.CoreV1Api(api).patch_namespaced_pod_status(name, namespace, {"status": status})


def test_status_lists_every_task_of_an_installed_release_and_why_it_waits(apiserver, namespace):
    """`tf-cluster status` on a release installed with Helm: every task listed (the Jobs' pods
    found by the chart's instance label), Pending with the scheduler's or the kubelet's reason,
    the failure count as restarts, the Jobs; before the Job controller made any pod, the tasks
    are listed all the same, with why."""
    from kubernetes import client

    api, kubeconfig = apiserver["api"], apiserver["kubeconfig"]
    r = helm_in(apiserver, "4", namespace).install("st", helm.Values.of([PS_EXAMPLE]))
    assert r.returncode == 0, r.stderr
    t0 = time.monotonic()
    before = tf_cluster("status", "st", "-n", namespace, "--kubeconfig", kubeconfig)
    took = time.monotonic() - t0
    print(f"\n$ tf-cluster status st -n {namespace}   ({took:.1f}s, before any pod)\n{before.stdout}")
    assert before.returncode == 0, before.stderr
    rows = {ln.split()[0]: ln for ln in before.stdout.splitlines() if ln.split() and ln.split()[0][-2:-1] == "-"}
    assert sorted(rows) == ["chief-0", "ps-0", "worker-0", "worker-1"]
    assert all(" pending (no pod) " in row for row in rows.values()), rows
    jobs = {j.metadata.name: j for j in client.BatchV1Api(api).list_namespaced_job(namespace).items}
    assert len(jobs) == 3
    for name in jobs:
        assert f"Job {name}: running (0/" in before.stdout
        assert f"Job {name} has not created its pod yet" in before.stdout

    role_job = {cluster_state.role_of(j): j for j in jobs.values()}
    unschedulable = "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available."
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    chief = job_pod(api, namespace, role_job["chief"], 0, "a")
    pod_status(
        api,
        namespace,
        chief,
        conditions=[
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": unschedulable,
                "lastTransitionTime": now,
            }
        ],
    )
    ps = job_pod(api, namespace, role_job["ps"], 0, "a", node="node-1")
    waiting = {"waiting": {"reason": "ContainerCreating"}}
    tf_status = {"name": "tensorflow", "image": "trainer", "imageID": "", "ready": False, "restartCount": 0}
    pod_status(api, namespace, ps, startTime=now, containerStatuses=[{**tf_status, "state": waiting}])
    oom = {"terminated": {"exitCode": 137, "reason": "OOMKilled", "startedAt": now, "finishedAt": now}}
    first = job_pod(api, namespace, role_job["worker"], 1, "a", node="node-1")
    pod_status(api, namespace, first, phase="Failed", startTime=now, containerStatuses=[{**tf_status, "state": oom}])
    job_pod(api, namespace, role_job["worker"], 1, "b", failures=1)
    job_pod(api, namespace, role_job["worker"], 0, "a")

    t0 = time.monotonic()
    after = tf_cluster("status", "st", "-n", namespace, "--kubeconfig", kubeconfig)
    took = time.monotonic() - t0
    print(
        f"$ tf-cluster status st -n {namespace}   ({took:.1f}s, pods as a scheduler and kubelets left them)\n"
        + after.stdout
    )
    assert after.returncode == 0, after.stderr
    rows = {ln.split()[0]: ln.split() for ln in after.stdout.splitlines() if ln.split() and ln.split()[0][-2:-1] == "-"}
    assert rows["chief-0"][1:4] == ["pending", "(Unschedulable)", "0"]
    assert rows["ps-0"][1:4] == ["pending", "(ContainerCreating)", "0"]
    assert rows["worker-0"][1:4] == ["pending", "(unscheduled)", "0"]
    assert rows["worker-1"][1:4] == ["pending", "(unscheduled)", "1"]  # replaced once after an OOM kill
    why = after.stdout.split("Why:\n")[1]
    assert f"  chief-0: Unschedulable: {unschedulable}" in why.splitlines()
    assert "  worker-0: no scheduler has placed it yet" in why.splitlines()
    assert "has not created its pod" not in after.stdout

    # --watch redraws until every Job is finished, then exits 0 by itself
    for name in jobs:
        finish(api, namespace, name, "Complete")
    watched = tf_cluster("status", "st", "-n", namespace, "--kubeconfig", kubeconfig, "--watch", "--interval", "1")
    assert watched.returncode == 0, watched.stderr
    assert watched.stdout.count("--- ") == 1 and ", every Job finished" in watched.stdout.splitlines()[1]
    assert all(f"Job {name}: Complete" in watched.stdout for name in jobs)


def test_status_of_a_release_that_is_not_there_says_so(apiserver, namespace):
    r = tf_cluster("status", "nope", "-n", namespace, "--kubeconfig", apiserver["kubeconfig"], process=True)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip() == (
        f"tf-cluster status: error: no pods or Jobs of release nope in namespace {namespace}: helm list -n {namespace}"
    )
    r = tf_cluster("logs", "nope", "-n", namespace, "--kubeconfig", apiserver["kubeconfig"])
    assert r.returncode == 2 and "no pods or Jobs of release nope" in r.stderr


def test_the_launchers_informer_lists_once_follows_a_watch_and_stops_at_once(
    apiserver, namespace, tmp_path, monkeypatch
):
    """The launcher's Informer (what its leader watch, peer wait and fence use): one LIST and one
    WATCH request while objects come and go, every change seen within a second, and stop() ends the
    open watch at once (not minutes later, at the watch's timeout)."""
    api = apiserver["api"]
    from kubernetes import client

    sys.path.insert(0, str(LAUNCHER.parent))
    import tf_cluster_launcher.informer as launcher_informer
    import tf_cluster_launcher.kubeapi as launcher_kubeapi

    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "watcher"}})
    rbac.create_namespaced_role(
        namespace,
        {
            "metadata": {"name": "watcher"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list", "watch"]}],
        },
    )
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "watcher"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "watcher"},
            "subjects": [{"kind": "ServiceAccount", "name": "watcher", "namespace": namespace}],
        },
    )
    sa_dir = token_for(apiserver, namespace, "watcher", tmp_path)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(apiserver["port"]))
    monkeypatch.setattr(launcher_kubeapi, "SA_DIR", str(sa_dir))
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    informer = launcher_informer.Informer(path, label_selector="app=x", name="cms")
    informer.start()
    assert informer.synced.wait(10), informer.error

    def names() -> set[str]:
        return {o["metadata"]["name"] for o in informer.snapshot()}

    def within(seconds: float, check) -> bool:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if check():
                return True
            informer.wait_for_change(0.1)
        return check()

    for i in range(3):
        core.create_namespaced_config_map(namespace, {"metadata": {"name": f"cm-{i}", "labels": {"app": "x"}}})
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "other", "labels": {"app": "y"}}})
    assert within(2, lambda: names() == {"cm-0", "cm-1", "cm-2"}), names()
    core.delete_namespaced_config_map("cm-1", namespace)
    assert within(2, lambda: names() == {"cm-0", "cm-2"}), names()
    assert informer.requests == 2, f"{informer.requests} requests: one LIST and one WATCH expected"
    # the API server's clock, read from the watch's answer (the fence compares deadlines on it)
    assert informer.clock_offset is not None and -2 < informer.clock_offset <= 0.5, informer.clock_offset
    t0 = time.monotonic()
    informer.stop()
    informer._thread.join(5)
    assert not informer._thread.is_alive(), "stop() left the watch open"
    assert time.monotonic() - t0 < 2


def self_fence_task(apiserver, namespace, tmp_path, monkeypatch):
    """The environment of worker 0's agent in release r, with the self-fence's Role (list and
    watch on pods) and its token; returns the launcher's kubeapi and selffence modules."""
    api = apiserver["api"]
    from kubernetes import client

    sys.path.insert(0, str(LAUNCHER.parent))
    import tf_cluster_launcher.kubeapi as launcher_kubeapi
    import tf_cluster_launcher.selffence as launcher_selffence

    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "fencer"}})
    rbac.create_namespaced_role(
        namespace,
        {
            "metadata": {"name": "fencer"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]}],
        },
    )
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "fencer"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "fencer"},
            "subjects": [{"kind": "ServiceAccount", "name": "fencer", "namespace": namespace}],
        },
    )
    monkeypatch.setattr(launcher_kubeapi, "SA_DIR", str(token_for(apiserver, namespace, "fencer", tmp_path)))
    monkeypatch.setenv("TF_CLUSTER_POD_NAME", "r-worker-0-abcde")
    monkeypatch.setenv("TF_CLUSTER_NAMESPACE", namespace)
    monkeypatch.setenv("TF_CLUSTER_ROLE", "worker")
    monkeypatch.setenv("TF_TASK_INDEX", "0")
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": ["r-worker-0.r:2222"]}}))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(apiserver["port"]))
    monkeypatch.setenv("TF_CLUSTER_STOP_GRACE", "1")
    launcher_kubeapi.ANSWERED.clear()
    return launcher_kubeapi, launcher_selffence


def ready_task_pod(core, namespace: str, ready: str = "True", name: str = "r-worker-0-abcde") -> None:
    """A pod of release r (worker 0's by default), Running, its Ready condition `ready` (no kubelet
    here: set by the test, as the node lifecycle controller would)."""
    job, index, _ = name.rsplit("-", 2)
    labels = {"app.kubernetes.io/instance": "r", "batch.kubernetes.io/job-name": job}
    labels["batch.kubernetes.io/job-completion-index"] = index
    spec = {"nodeName": "n1", "containers": [{"name": "t", "image": "x"}], "serviceAccountName": "fencer"}
    spec["automountServiceAccountToken"] = False  # no controller here: no token to mount
    if not core.list_namespaced_pod(namespace, field_selector="metadata.name=" + name).items:
        core.create_namespaced_pod(namespace, {"metadata": {"name": name, "labels": labels}, "spec": spec})
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    conditions = [{"type": "Ready", "status": ready, "lastTransitionTime": now}]
    core.patch_namespaced_pod_status(name, namespace, {"status": {"phase": "Running", "conditions": conditions}})


def pulse_writers_pod(apiserver, core, namespace: str) -> None:
    """The chief's pod, Ready, and the Role's pods/status patch (the fence's verb) its pulse needs."""
    from kubernetes import client

    rbac = client.RbacAuthorizationV1Api(apiserver["api"])
    rule = {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]}
    rules = [*rbac.read_namespaced_role("fencer", namespace).rules, rule]
    rbac.patch_namespaced_role("fencer", namespace, {"rules": rules})
    ready_task_pod(core, namespace, name="r-chief-0-fghij")


def test_the_self_fence_hears_the_api_server_within_its_bound_and_stops_a_task_that_cannot(
    apiserver, namespace, tmp_path, monkeypatch
):
    """Issue 43, split brain: the agent's self-fence (selffence.py) watches its own pod. While no
    line of that watch shows the pod Ready (here: no pod), its watch ends every quarter of the bound
    so that a request gets an answer that often (only a round trip proves the server heard the
    node). Against the real API server a healthy task never self-fences; against an API server
    that no longer answers, it does, within the bound."""
    launcher_kubeapi, launcher_selffence = self_fence_task(apiserver, namespace, tmp_path, monkeypatch)

    def fence(port: int, bound: float, seconds: float) -> tuple[list[str], list[float]]:
        monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(port))
        launcher_kubeapi.ANSWERED.clear()
        told, silences, stop = [], [], threading.Event()
        pods = launcher_selffence.task_pods()
        assert pods is not None
        t = threading.Thread(target=launcher_selffence.self_fence_loop, args=(stop, bound, told.append, pods, 0.5))
        t.start()
        end = time.monotonic() + seconds
        while time.monotonic() < end and not told:
            silences.append(launcher_kubeapi.silent_for() or 0.0)
            time.sleep(0.25)
        stop.set()
        t.join(10)
        pods.stop()
        return told, silences

    # healthy: 16 s at a bound of 8 s (the watch ends every 2 s), never silent for half the bound
    told, silences = fence(apiserver["port"], 8, 16)
    assert not told, told
    assert max(silences) < 4, f"the API server's answers came {max(silences):.1f}s apart"
    # an API server that does not answer (nothing listens there): the task stops within the bound
    t0 = time.monotonic()
    told, _ = fence(free_port(), 4, 15)
    assert told and "no answer from the API server for 4s" in told[0], told
    assert time.monotonic() - t0 < 4 + 1.5


def test_a_ready_tasks_self_fence_asks_for_no_round_trip_and_one_when_its_pod_turns_not_ready(
    apiserver, namespace, tmp_path, monkeypatch
):
    """Issue 46, the steady cost: while its pod is Ready, the agent's watch is its proof (the
    server's bookmarks), so the watch runs its whole 10-20 minutes: no request. When the pod turns
    not Ready, the agent ends that watch at once (a round trip: the next watch's answer) and asks
    for one every quarter of the bound again. The release's pulse (the first fencer's condition,
    which makes those bookmarks come) is written beside the kubelet's conditions."""
    from kubernetes import client

    launcher_kubeapi, launcher_selffence = self_fence_task(apiserver, namespace, tmp_path, monkeypatch)
    core = client.CoreV1Api(apiserver["api"])
    ready_task_pod(core, namespace)
    bound, told, stop = 240.0, [], threading.Event()
    pods = launcher_selffence.task_pods()
    assert pods is not None
    t = threading.Thread(target=launcher_selffence.self_fence_loop, args=(stop, bound, told.append, pods, 0.2))
    t.start()
    try:
        deadline = time.monotonic() + 10
        while pods.requests < 2:  # its LIST and its first watch
            assert time.monotonic() < deadline, f"{pods.requests} request(s) in 10 s: no watch"
            time.sleep(0.1)
        time.sleep(1)  # five checks with its pod Ready: no round trip asked for
        assert pods.answer_within is None and pods.requests == 2, (pods.answer_within, pods.requests)
        asked = pods.requests
        ready_task_pod(core, namespace, ready="False")
        deadline = time.monotonic() + 10
        while pods.requests == asked:
            assert time.monotonic() < deadline, "no round trip once the pod turned not Ready"
            time.sleep(0.1)
        assert pods.answer_within == bound / 4
        assert pods.error is None, f"ending the watch was counted as a failure: {pods.error}"
        assert not told, told
    finally:
        stop.set()
        t.join(10)
        pods.stop()
    # the pulse, as the chief's agent writes it
    pulse_writers_pod(apiserver, core, namespace)
    beats, stop = [], threading.Event()
    pulse = threading.Thread(target=launcher_selffence.pulse_loop, args=(stop, 0.5, "r-chief-0-fghij"))
    pulse.start()
    try:
        deadline = time.monotonic() + 10
        while len(beats) < 2:
            assert time.monotonic() < deadline, f"the pulse wrote {len(beats)} time(s) in 10 s"
            status = core.read_namespaced_pod("r-chief-0-fghij", namespace).status
            conditions = {c.type: c for c in status.conditions or []}
            if launcher_selffence.PULSE in conditions:
                at = conditions[launcher_selffence.PULSE].last_probe_time
                if at not in beats:
                    beats.append(at)
            time.sleep(0.2)
    finally:
        stop.set()
        pulse.join(10)
    assert conditions["Ready"].status == "True", "the pulse replaced the kubelet's conditions"


@pytest.mark.extended
def test_a_ready_tasks_watch_brings_a_bookmark_every_minute_and_that_keeps_it_heard(
    apiserver, namespace, tmp_path, monkeypatch
):
    """Issue 46: the proof the steady state rests on, from the real API server: with no change to
    the task's pod, its watch still brings a line (a bookmark) about every minute once the
    release's pulse (on the chief's pod) moved the pods' resourceVersion on, so a Ready task is
    never unheard for half its bound and sends one request (the watch) in 135 s."""
    from kubernetes import client

    launcher_kubeapi, launcher_selffence = self_fence_task(apiserver, namespace, tmp_path, monkeypatch)
    core = client.CoreV1Api(apiserver["api"])
    ready_task_pod(core, namespace)
    bound, told, stop = 240.0, [], threading.Event()
    pods = launcher_selffence.task_pods()  # its first watch too lasts 10-20 minutes
    assert pods is not None and pods.answer_within is None
    t = threading.Thread(target=launcher_selffence.self_fence_loop, args=(stop, bound, told.append, pods, 0.5))
    t.start()
    pulse_writers_pod(apiserver, core, namespace)
    pulse = threading.Thread(
        target=launcher_selffence.pulse_loop, args=(stop, launcher_selffence.PULSE_SECONDS, "r-chief-0-fghij")
    )
    pulse.start()
    lines: list[float] = []
    t0 = time.monotonic()
    try:
        while time.monotonic() - t0 < 135:
            if pods.streamed_at is not None and (not lines or pods.streamed_at > lines[-1]):
                lines.append(pods.streamed_at)
            time.sleep(0.5)
    finally:
        stop.set()
        t.join(10)
        pulse.join(10)
        pods.stop()
    assert not told, told
    seen = [round(a - t0) for a in lines]
    assert len(lines) >= 2 and all(b - a < 75 for a, b in zip(lines, lines[1:], strict=False)), (
        f"watch lines at {seen} s"
    )
    assert 135 - (lines[-1] - t0) < 75, f"watch lines at {seen} s"
    assert pods.requests <= 2, f"{pods.requests} requests: the LIST and one watch expected"


def test_fencers_on_one_node_ask_a_task_on_another_to_fence_and_it_does(apiserver, namespace, tmp_path, monkeypatch):
    """Issue 43, fencers that survive any one node: the chart spreads nothing by default, so the
    fencers (the chief and worker 0 here) may share a node, whose loss would leave nobody to fence.
    A fencer then asks the first task on another node to fence too: a condition on its pod, set
    with pods/status (the fence's own verb) merged by type so that the kubelet's conditions stay;
    that task's agent reads it on its task's pods and fences the pods stranded on the lost node."""
    api = apiserver["api"]
    from kubernetes import client

    sys.path.insert(0, str(LAUNCHER.parent))
    import tf_cluster_launcher.agent as launcher_agent
    import tf_cluster_launcher.fencing as launcher_fencing
    import tf_cluster_launcher.kubeapi as launcher_kubeapi
    import tf_cluster_launcher.selffence as launcher_selffence

    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "launcher"}})
    rules = [  # the chart's Role with nodeLoss.fence (templates/rbac.yaml)
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]},
        {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
    ]
    rbac.create_namespaced_role(namespace, {"metadata": {"name": "launcher"}, "rules": rules})
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "launcher"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "launcher"},
            "subjects": [{"kind": "ServiceAccount", "name": "launcher", "namespace": namespace}],
        },
    )
    hosts = {"chief": ["r-chief-0.r:2222"], "worker": ["r-worker-0.r:2222", "r-worker-1.r:2222", "r-worker-2.r:2222"]}
    placed = {"r-chief-0": "n1", "r-worker-0": "n1", "r-worker-1": "n2", "r-worker-2": "n2"}
    for hostname, node in placed.items():
        job, index = hostname.rsplit("-", 1)
        labels = {"app.kubernetes.io/instance": "r", "batch.kubernetes.io/job-name": job}
        labels["batch.kubernetes.io/job-completion-index"] = index
        spec = {"hostname": hostname, "subdomain": "r", "nodeName": node, "containers": [{"name": "t", "image": "x"}]}
        spec.update(serviceAccountName="launcher", automountServiceAccountToken=False)  # no controller: no default SA
        core.create_namespaced_pod(namespace, {"metadata": {"name": hostname + "-p", "labels": labels}, "spec": spec})
        now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        ready = [{"type": t, "status": "True", "lastTransitionTime": now} for t in ("PodScheduled", "Ready")]
        core.patch_namespaced_pod_status(
            hostname + "-p", namespace, {"status": {"phase": "Running", "conditions": ready}}
        )
    monkeypatch.setattr(launcher_kubeapi, "SA_DIR", str(token_for(apiserver, namespace, "launcher", tmp_path)))
    for k, v in {
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": str(apiserver["port"]),
        "TF_CLUSTER_NAMESPACE": namespace,
        "TF_CLUSTER_RELEASE_SELECTOR": "app.kubernetes.io/instance=r",
        "TF_CLUSTER_FENCE_SECONDS": "0.5",
        "TF_CLUSTER_FENCE_AFTER": "0",
        "TF_CLUSTER_POD_NAME": "r-chief-0-p",
        "TF_CONFIG": json.dumps({"cluster": hosts, "task": {"type": "chief", "index": 0}}),
    }.items():
        monkeypatch.setenv(k, v)

    def conditions(name: str) -> dict[str, str]:
        return {c.type: c.status for c in core.read_namespaced_pod(name, namespace).status.conditions or []}

    def wait_for(check, what: str, timeout: float = 30):
        deadline = time.monotonic() + timeout
        while not check():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.2)

    # the chief fences (by rule); every fencer is on n1: it asks worker 1, the first task on n2
    stop = threading.Event()
    fencer = threading.Thread(target=launcher_fencing.fence_loop, args=(stop,))
    fencer.start()
    try:
        wait_for(lambda: conditions("r-worker-1-p").get(launcher_fencing.DEPUTY) == "True", "worker 1 asked to fence")
        time.sleep(2)  # four more checks: it asks once, and no one else
    finally:
        stop.set()
        fencer.join(10)
    assert conditions("r-worker-1-p") == {"PodScheduled": "True", "Ready": "True", launcher_fencing.DEPUTY: "True"}
    assert launcher_fencing.DEPUTY not in conditions("r-worker-2-p")
    # worker 1's agent reads it among its task's pods and fences: n1 is lost (its pods deleted, never confirmed)
    monkeypatch.setenv("TF_CLUSTER_POD_NAME", "r-worker-1-p")
    monkeypatch.setenv("TF_CLUSTER_ROLE", "worker")
    monkeypatch.setenv("TF_TASK_INDEX", "1")
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": hosts, "task": {"type": "worker", "index": 1}}))
    pods = launcher_selffence.task_pods()
    assert pods is not None
    agent = launcher_agent.Agent()
    deputy = threading.Thread(target=agent.fence_when_asked, args=(pods, 0.2))
    deputy.start()
    try:
        for name in ("r-chief-0-p", "r-worker-0-p"):
            core.delete_namespaced_pod(name, namespace, grace_period_seconds=1)
        phases = lambda: {n: core.read_namespaced_pod(n, namespace).status for n in ("r-chief-0-p", "r-worker-0-p")}  # noqa: E731
        wait_for(lambda: all(s.phase == "Failed" for s in phases().values()), "n1's pods fenced by worker 1")
    finally:
        agent.stop.set()
        deputy.join(10)
        pods.stop()
    assert {s.reason for s in phases().values()} == {"NodeLost"}


def no_claims_values(tmp_path) -> Path:
    """Values without a claim: a claim's finalizer needs kube-controller-manager, absent here."""
    f = tmp_path / "no-claims.yaml"
    f.write_text("storage: {checkpoints: {type: emptyDir}}\n")
    return f


def signalled_at(argv: list, line: str, check=lambda: None, timeout: float = 240) -> tuple[int, str, str]:
    """Run a `tf-cluster` command, SIGTERM it once it prints `line` (after `check()`, which may
    assert what holds by then); (exit code, all it printed on stdout, stderr)."""
    import signal

    proc = subprocess.Popen(list(map(str, argv)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    said = []
    try:
        assert proc.stdout is not None
        for said_line in proc.stdout:
            said.append(said_line)
            if line in said_line:
                break
        assert any(line in s for s in said), "".join(said)
        check()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, "".join(said) + out, err


def test_a_signalled_smoke_uninstalls_its_release_and_deletes_its_namespace(apiserver, tmp_path):
    """SIGTERM to `tf-cluster smoke` while it waits for the Jobs (no node runs them here) ends it
    as Ctrl-C does (issue 44): the release it installed is uninstalled and the namespace it made
    is deleted; it exits 143 and says why, in one line."""
    from kubernetes import client

    ns = "e2e-smoke-sigterm"
    core = client.CoreV1Api(apiserver["api"])
    argv = [sys.executable, "-m", "tf_cluster.cli", "smoke", "-f", ROOT / "values-examples" / "mwms-cpu.yaml"]
    argv += ["-f", no_claims_values(tmp_path)]
    argv += ["--kubeconfig", apiserver["kubeconfig"], "-n", ns, "--release", "sig", "--timeout", "600"]

    def installed() -> None:  # smoke says each step; the Jobs' wait comes after the install
        assert core.read_namespace(ns).status.phase == "Active"
        assert "sig" in helm_in(apiserver, "4", ns).run("list", "-q", check=True).stdout

    rc, said, err = signalled_at(argv, "waiting for every Job", installed)
    assert rc == 143, said[-3000:] + err[-2000:]
    assert "stopped by SIGTERM" in err and "Traceback" not in err, err[-2000:]
    assert "helm uninstall sig" in said and f"namespace {ns} deleted" in said, said
    assert "sig" not in helm_in(apiserver, "4", ns).releases()
    try:  # no namespace controller runs here: a deleted namespace stays Terminating
        assert core.read_namespace(ns).metadata.deletion_timestamp is not None
    except client.ApiException as e:
        assert e.status == 404, e


def test_a_signalled_install_keeps_its_release_and_uninstall_removes_it(apiserver, namespace, tmp_path):
    """`tf-cluster install` (issue 42): SIGTERM while it waits for the tasks (no node runs them here)
    stops the wait, not the release: it exits 143 saying the release stays and how to remove it;
    `tf-cluster uninstall` then removes it and leaves the namespace."""
    from kubernetes import client

    cli = [sys.executable, "-m", "tf_cluster.cli"]
    where = ["--kubeconfig", apiserver["kubeconfig"], "-n", namespace]
    values = ["-f", ROOT / "values-examples" / "mwms-cpu.yaml", "-f", no_claims_values(tmp_path)]
    rc, said, err = signalled_at(
        [*cli, "install", "inst", *values, *where], "waiting until every task runs", timeout=60
    )
    assert rc == 143, said[-3000:] + err[-2000:]
    assert "release inst installed" in said, said
    assert f"release inst stays installed (follow it: tf-cluster status inst -n {namespace} --watch" in said, said
    assert "Traceback" not in err, err[-2000:]
    assert "inst" in helm_in(apiserver, "4", namespace).run("list", "-q", check=True).stdout

    gone = subprocess.run(list(map(str, [*cli, "uninstall", "inst", *where])), capture_output=True, text=True)
    assert gone.returncode == 0, gone.stderr
    assert f"release inst uninstalled from namespace {namespace}, its pods gone; the namespace stays" in gone.stdout, (
        gone.stdout
    )
    assert "inst" not in helm_in(apiserver, "4", namespace).releases()
    assert client.CoreV1Api(apiserver["api"]).read_namespace(namespace).status.phase == "Active"


def test_a_server_stopped_with_its_leader_records_it_as_an_event_on_its_pod(apiserver, namespace, tmp_path):
    """Issue 47: the launcher tells a platform's tools, not only its log. A ps whose chief's Job
    completes records `StoppedWithLeader` on its own pod (what `kubectl describe pod` and
    `kubectl events` show), with the release's own token. Issue 44: as the chart's pod runs it, the
    token in the agent alone: the ps's launcher, without one, learns from the agent that the chief's
    Job completed and stops; the agent records the Event."""
    from kubernetes import client

    pod = "tf-tf-cluster-ps-0-x1y2z"
    proc, chief = ps_launcher(apiserver, namespace, tmp_path, "tf-tf-cluster", agent=True, TF_CLUSTER_POD_NAME=pod)
    assert proc.stdout.readline().strip() == "serving"
    core = client.CoreV1Api(apiserver["api"])
    (ps_job,) = [
        j for j in client.BatchV1Api(apiserver["api"]).list_namespaced_job(namespace).items if "-ps-" in j.metadata.name
    ]
    template = client.ApiClient().sanitize_for_serialization(ps_job.spec.template)
    labels = {**template["metadata"]["labels"], "batch.kubernetes.io/job-name": ps_job.metadata.name}
    core.create_namespaced_pod(namespace, {"metadata": {"name": pod, "labels": labels}, "spec": template["spec"]})
    # The agent starts beside the task (the ps serves before it): the chief finishes once it watches,
    # so that the stop is the watch's (a loaded machine once started it after the chief had finished).
    watching, deadline = f"will stop when Job {chief} finishes (watched)", time.monotonic() + 60
    while watching not in (tmp_path / "agent.log").read_text():
        assert time.monotonic() < deadline, "no watch of the leading Job: " + (tmp_path / "agent.log").read_text()
        time.sleep(0.2)
    finish(apiserver["api"], namespace, chief, "Complete")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "leading Job completed; task stopped (exit 0)" in err, err
    assert (tmp_path / "agent" / "leader").read_text().strip() == "Complete"
    assert not any((tmp_path / "no-token").iterdir()), "the task's launcher has no token"
    events = core.list_namespaced_event(namespace).items
    (event,) = [e for e in events if e.involved_object.name == pod]
    assert (event.reason, event.type, event.source.component, event.count) == (
        "StoppedWithLeader",
        "Normal",
        "tf-cluster-launcher",
        1,
    ), event
    assert f"Job {chief} is Complete: task stopped (exit 0)" in event.message, event.message
    assert "cannot record" not in err, err
    status = subprocess.run(
        [
            sys.executable,
            "-m",
            "tf_cluster.cli",
            "status",
            "tf",
            "-n",
            namespace,
            "--kubeconfig",
            apiserver["kubeconfig"],
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert status.returncode == 0, status.stderr
    assert "Events (latest, from the launchers):" in status.stdout, status.stdout
    assert re.search(rf"^  \d\d:\d\d:\d\d {pod} StoppedWithLeader: Job {chief} is Complete", status.stdout, re.M), (
        status.stdout
    )


def test_a_recurring_moment_is_one_event_whose_count_grows(apiserver, namespace, tmp_path, monkeypatch, capsys):
    """A wait of an hour is one Event, not hundreds: the launcher creates it once and updates its
    count and message in place (at most every Events.EVERY seconds, 0 here)."""
    from kubernetes import client

    sys.path.insert(0, str(LAUNCHER.parent))
    import tf_cluster_launcher.events as launcher_events
    import tf_cluster_launcher.kubeapi as launcher_kubeapi

    for k, v in {
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": str(apiserver["port"]),
        "TF_CLUSTER_NAMESPACE": namespace,
        "TF_CLUSTER_POD_NAME": "tf-tf-cluster-worker-0-abcde",
    }.items():
        monkeypatch.setenv(k, v)
    docs = helm.parse(helm.template([PS_EXAMPLE], release="tf", namespace=namespace))
    from kubernetes import utils

    for doc in docs:  # the release's ServiceAccount, Role and RoleBinding
        if doc["kind"] in ("ServiceAccount", "Role", "RoleBinding"):
            utils.create_from_dict(apiserver["api"], doc, namespace=namespace)
    monkeypatch.setattr(launcher_kubeapi, "SA_DIR", str(token_for(apiserver, namespace, "tf-tf-cluster", tmp_path)))
    events = launcher_events.Events()
    events.EVERY = 0.0
    for i in range(3):
        events.record("WaitingForPeers", f"waiting for 1/2 peer pod(s) ({i * 5}s/600s): worker-1 (no pod)")
    assert events.on, capsys.readouterr().err
    (event,) = client.CoreV1Api(apiserver["api"]).list_namespaced_event(namespace).items
    assert (event.reason, event.count) == ("WaitingForPeers", 3), event
    assert event.message.startswith("waiting for 1/2 peer pod(s) (10s/600s)"), event.message
    assert events.on, "no request was refused"

    # a release of 4096 tasks: each Event is updated at most every 4096/10 s, so that all its tasks
    # together send at most Events.RELEASE_RATE updates a second (tests/bench/bench_sim_events.py)
    cluster = {"worker": [f"w-{i}.t:2222" for i in range(4094)], "ps": ["p-0.t:2222", "p-1.t:2222"]}
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 0}}))
    monkeypatch.setenv("TF_CLUSTER_POD_NAME", "tf-tf-cluster-worker-1-fghij")
    large = launcher_events.Events()
    for i in range(3):
        large.record("WaitingForPeers", f"waiting for 4095/4096 peer pod(s) ({i * 5}s/600s)")
    assert large.every == 409.6
    mine = [
        e
        for e in client.CoreV1Api(apiserver["api"]).list_namespaced_event(namespace).items
        if e.involved_object.name == "tf-tf-cluster-worker-1-fghij"
    ]
    assert [(e.count, e.message) for e in mine] == [(1, "waiting for 4095/4096 peer pod(s) (0s/600s)")]


def test_warning_events_are_listed_in_the_order_they_happened(apiserver, namespace):
    """A failed test's story and `kube.diagnostics()` tell what went wrong in time order: the API
    lists Events by name, which is not when they happened."""
    from datetime import timedelta

    from kubernetes import client

    core = client.CoreV1Api(apiserver["api"])
    t0 = datetime.now(timezone.utc).replace(microsecond=0)
    for name, type_, reason, seconds in [
        ("a-late", "Warning", "BackOff", 30),
        ("b-first", "Warning", "FailedMount", 0),
        ("c-normal", "Normal", "Pulled", 10),
        ("d-middle", "Warning", "Unhealthy", 20),
    ]:
        when = t0 + timedelta(seconds=seconds)
        core.create_namespaced_event(
            namespace,
            client.CoreV1Event(
                metadata=client.V1ObjectMeta(name=name),
                involved_object=client.V1ObjectReference(kind="Pod", name=f"pod-{name}", namespace=namespace),
                type=type_,
                reason=reason,
                message=f"{reason} at +{seconds}s",
                first_timestamp=when,
                last_timestamp=when,
            ),
        )
    assert kube.warning_events(core, namespace, last=10) == [
        "  Pod/pod-b-first: FailedMount: FailedMount at +0s",
        "  Pod/pod-d-middle: Unhealthy: Unhealthy at +20s",
        "  Pod/pod-a-late: BackOff: BackOff at +30s",
    ]
    assert [line.split(":")[1] for line in kube.warning_events(core, namespace, last=2)] == [" Unhealthy", " BackOff"]


VALIDATED_CASES = sorted(
    [
        *(ROOT / "values-examples").glob("*.yaml"),
        *(ROOT / "tests" / "golden" / "cases").glob("*.yaml"),
    ]
)


def account(apiserver, namespace: str, name: str) -> None:
    from kubernetes import client

    try:
        client.CoreV1Api(apiserver["api"]).create_namespaced_service_account(namespace, {"metadata": {"name": name}})
    except client.ApiException as e:
        if e.status != 409:  # 409: there already
            raise


def test_what_validate_calls_ok_the_api_server_accepts(apiserver, namespace):
    """Issue 44: `tf-cluster validate` never says ok for a render the API server refuses. Every example
    and golden case that validate passes is created here with server-side dry-run (the API server's
    own validation and admission, nothing stored); the bad-values corpus never gets this far (each
    file is refused at render: tests/chart/test_bad_values.py)."""
    from kubernetes import dynamic
    from kubernetes.dynamic.exceptions import ResourceNotFoundError

    dyn = dynamic.DynamicClient(apiserver["api"])
    created, unserved = 0, set()
    for i, case in enumerate(VALIDATED_CASES):
        r = subprocess.run(
            [sys.executable, "-m", "tf_cluster.cli", "validate", "-f", str(case)], capture_output=True, text=True
        )
        assert r.returncode == 0 and "ok:" in r.stdout, (case.name, r.stdout, r.stderr)
        # a release per case: an account created for one case's hook must not meet the next one's
        docs = helm.parse(helm.template([case], release=f"dr{i}", namespace=namespace))
        for doc in docs:
            try:
                kind = dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
            except ResourceNotFoundError:  # a CRD's kind (PodMonitor, a gang's PodGroup) not installed here
                unserved.add(f"{doc['apiVersion']}/{doc['kind']}")
                continue
            where = {"namespace": namespace} if kind.namespaced else {}
            if doc["kind"] == "Pod":  # a hook (helm test): its account exists by then, the chart's or the named one
                account(apiserver, namespace, doc["spec"].get("serviceAccountName", "default"))
            try:
                kind.create(body=doc, dry_run="All", **where)
            except Exception as e:  # noqa: BLE001 - any refusal fails the case, named
                pytest.fail(
                    f"{case.name}: validate said ok, the API server refused {doc['kind']} "
                    f"{doc['metadata']['name']}: {getattr(e, 'body', e)}"
                )
            created += 1
    print(f"{len(VALIDATED_CASES)} cases, {created} objects accepted by the API server (dry-run); "
        f"kinds not served here: {sorted(unserved)}")  # fmt: skip
    assert created > 10 * len(VALIDATED_CASES) // 2
