"""A simulated cluster for scale (tests/bench/bench_sim.py, tests/e2e/cluster/test_scale.py): the
real etcd, kube-apiserver, kube-controller-manager and kube-scheduler (1.37, built by
hack/node/build.sh, gang scheduling on as the node harness turns it on), kwok's fake nodes and
pods (sigs.k8s.io/kwok: a node labelled KWOK_NODE is an object kwok keeps Ready, with its Lease;
a pod bound to one turns Running with an IP and stays so until deleted; a node relabelled is lost, as
a dead kubelet's: lose_node), and the real CoreDNS with the Kubernetes
addon's Corefile (ttl 30, cache 30) serving the cluster's names.

Everything but Kubernetes' own defaults is named here: the controller manager and scheduler keep
their client rate limits (what a cluster that has not tuned them has), etcd keeps its 2 GB quota.
Memory is what limits it on one machine: a 4096-task release of a chart whose pods carried their
TF_CONFIG (before 2.0.0: bench_sim.py's "chart before" rows) held ~1.8 GB in etcd, etcd keeps 5000
raft entries, and the API server and etcd run with a GOMEMLIMIT (6 and 4 GiB).

The API server writes an audit log of the requests made by service accounts (the tasks' own token,
bound to its pod as the kubelet's are, so each event names the pod in its user's extra: sim_audit.POD_NAME):
bench_sim.py counts a launcher's requests there, and the API server's own metrics for the rest.

    from node.sim import SimCluster     (hack/ on sys.path)
    with SimCluster(Path("build/sim"), nodes=256) as sim:
        api = sim.api

Its binaries: hack/node/build.sh (the node's, and kwok), cached as the node's are.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import yaml

from .config import BIN, CACHE
from .deferred import wait as wait_deferred
from .pki import loopback_apiserver_pki, token_kubeconfig

KWOK_DIR = Path(os.environ.get("KWOK_DIR") or CACHE / f"kwok-{os.environ.get('KWOK_VERSION', '0.8.0')}")
ADMIN_TOKEN = "sim-admin-token"
# The label of the nodes kwok plays (--manage-nodes-with-label-selector): a label, not kwokctl's
# annotation, because a label selector is the API server's. A node relabelled leaves the selection,
# and kwok's watch of it gets a DELETED event: kwok forgets the node (no Lease renewal, no status
# heartbeat, its pods untouched). An annotation selector is kwok's own filter on the events it gets
# (kwok 0.8.0, pkg/utils/informer): a node that stops matching sends it nothing, and kwok goes on
# renewing its Lease.
KWOK_NODE = ("kwok.x-k8s.io/node", "fake")
# as hack/node/control_plane.py: the gang API served, and GenericWorkload on in all three
GANG = ["--feature-gates=GenericWorkload=true"]
# The Corefile of Kubernetes' CoreDNS addon (kubeadm's), on a loopback address of its own; no
# upstream (every name asked is the cluster's) and its metrics on a port of their own.
COREFILE = """.:53 {{
    bind {ip}
    errors
    kubernetes cluster.local in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig} sim
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }}
    prometheus 127.0.0.1:{metrics}
    cache 30
    loadbalance
}}
"""
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [{"level": "Metadata", "userGroups": ["system:serviceaccounts"]}, {"level": "None"}],
}


def missing() -> str | None:
    """Why the simulated cluster cannot start here (None: it can). kwok may still be building
    beside the scenarios (`make check`: node/deferred.py): that build is waited for."""
    why = wait_deferred("kwok")
    if why:
        return why
    need = [BIN / c for c in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "coredns")]
    need.append(KWOK_DIR / "kwok")
    absent = [str(p) for p in need if not p.exists()]
    if absent:
        return (
            "not built: "
            + ", ".join(absent)
            + " (hack/node/build.sh kube-apiserver kube-controller-manager kube-scheduler coredns kwok)"
        )
    for tool in ("etcd", "openssl", "unshare"):
        if not shutil.which(tool):
            return f"{tool} is not installed"
    return None


_given_lock = threading.Lock()
_given_ports: set[int] = set()  # handed out by this process: clusters started side by side (bench_sim
_given_dns: set[str] = set()  # --beside) each get their own, though the first is not bound yet


def free_port() -> int:
    """A loopback TCP port free now and not handed out before by this process."""
    with _given_lock:
        while True:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            if port not in _given_ports:
                _given_ports.add(port)
                return port


def free_dns_ip(first: int = 153) -> str:
    """A loopback address (127.0.0.<first> on) whose DNS port is free and that this process has not
    handed out: each simulated cluster's CoreDNS listens on port 53 of its own."""
    with _given_lock:
        for last in range(first, 255):
            ip = f"127.0.0.{last}"
            if ip in _given_dns:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                try:
                    s.bind((ip, 53))
                except OSError:
                    continue
            _given_dns.add(ip)
            return ip
    raise RuntimeError(f"no loopback address from 127.0.0.{first} on has port 53 free")


def sh(*argv) -> None:
    subprocess.run([str(a) for a in argv], check=True, capture_output=True)


def counters(text: str, name: str) -> dict[tuple, float]:
    """The samples of one Prometheus counter in a /metrics text, by their label set."""
    out: dict[tuple, float] = {}
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        head, _, value = line.rpartition(" ")
        labels = ()
        if "{" in head:
            body = head[head.index("{") + 1 : head.rindex("}")]
            labels = tuple(sorted(tuple(kv.split("=", 1)) for kv in _split_labels(body)))
        out[tuple((k, v.strip('"')) for k, v in labels)] = float(value)
    return out


def _split_labels(body: str) -> list[str]:
    parts, cur, quoted = [], "", False
    for ch in body:
        if ch == '"':
            quoted = not quoted
        if ch == "," and not quoted:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return [p for p in parts + [cur] if p]


def pod_env(pod: dict, config_map: Callable[[str], dict] | None = None) -> dict[str, str]:
    """The trainer container's environment as the kubelet would give it: tf_cluster.manifests.resolve_env
    (values, $(VAR) references, ConfigMap keys, CPU counts) with this live pod's downward-API fields;
    `config_map(name)` gives a ConfigMap's data (e.g. the run's TF_CONFIG cluster), read once for each
    ConfigMap the container refers to."""
    from tf_cluster import manifests

    c = next(c for c in pod["spec"]["containers"] if c["name"] in ("trainer", "tensorflow"))
    meta, spec, status = pod["metadata"], pod["spec"], pod.get("status") or {}

    def live_field(path: str) -> str | None:
        m = re.match(r"metadata\.(labels|annotations)\['(.+)'\]", path)
        if m:
            return (meta.get(m.group(1)) or {}).get(m.group(2), "")
        return {
            "metadata.name": meta["name"],
            "metadata.uid": meta.get("uid", ""),  # the launcher's Events name their pod by it
            "metadata.namespace": meta["namespace"],
            "spec.nodeName": spec.get("nodeName", ""),
            "status.podIP": status.get("podIP", ""),
            "status.hostIP": status.get("hostIP", ""),
        }.get(path)

    refs = {(e.get("valueFrom") or {}).get("configMapKeyRef", {}).get("name") for e in c.get("env", [])}
    refs |= {(s.get("configMapRef") or {}).get("name") for s in c.get("envFrom") or []}  # the run's environment
    refs -= {None}
    maps = {name: config_map(name) for name in refs} if config_map is not None else {}

    index = int((meta.get("annotations") or {}).get(manifests.INDEX_ANNOTATION, 0))
    return manifests.resolve_env(
        c, index=index, namespace=meta["namespace"], node_cpus=1, config_maps=maps, live_field=live_field
    )


class SimCluster:
    def __init__(self, work: Path, nodes: int = 256, node_pods: int = 32, dns_ip: str | None = None):
        self.work = Path(work)
        self.nodes, self.node_pods, self.dns_ip = nodes, node_pods, dns_ip or free_dns_ip()
        self.procs: dict[str, subprocess.Popen] = {}
        self.config_maps: dict[tuple[str, str], dict] = {}
        self.agents: dict[str, subprocess.Popen] = {}  # pod name -> its tf-cluster-agent sidecar (task())
        self.tasks: list[subprocess.Popen] = []  # task()'s launchers
        self.port = free_port()
        self.dns_metrics = free_port()
        self.kubeconfig = self.work / "kubeconfig"
        self.audit_log = self.work / "audit.log"
        self.api = None
        # down() closes the cluster: a process start()/task() would add after it is refused, so that
        # a thread still starting this cluster when another takes it down leaves nothing running
        self.closed = False
        self._starting = threading.Lock()

    # ------------------------------------------------------------------ up and down

    def _open(self) -> None:  # under self._starting
        if self.closed:
            raise RuntimeError(f"the simulated cluster in {self.work} was taken down: nothing more starts in it")

    def __enter__(self) -> SimCluster:
        try:
            self.up()
        except BaseException:
            self.down()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.down()

    def start(self, name: str, argv: list, env: dict | None = None) -> None:
        log = open(self.work / f"{name}.log", "w")
        with self._starting:
            self._open()
            self.procs[name] = subprocess.Popen(
                [str(a) for a in argv], stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
            )

    def up(self) -> None:
        why = missing()
        if why:
            raise RuntimeError(why)
        if self.work.exists():
            shutil.rmtree(self.work)
        self.work.mkdir(parents=True)
        loopback_apiserver_pki(self.work, "tf-cluster-sim-ca", 2, ADMIN_TOKEN)
        self.etcd_dir = self.work / "etcd"
        etcd, peer = free_port(), free_port()
        self.etcd_port = etcd
        self.start(
            "etcd",
            [
                "etcd",
                "--data-dir",
                self.etcd_dir,
                "--listen-client-urls",
                f"http://127.0.0.1:{etcd}",
                "--advertise-client-urls",
                f"http://127.0.0.1:{etcd}",
                "--listen-peer-urls",
                f"http://127.0.0.1:{peer}",
                # etcd 3.4 keeps its last --snapshot-count raft entries (100000) in memory: at ~120 KB
                # a pod write (a pod that carries its TF_CONFIG) a 4096-task start held ~8 GB
                "--snapshot-count=5000",
            ],
            # a 4096-task release took the API server to 11 GB and this 24 GB machine out of memory;
            # a soft limit makes Go collect sooner (what a control-plane node's memory would enforce)
            env={"GOMEMLIMIT": "4GiB"},
        )
        (self.work / "audit-policy.yaml").write_text(yaml.safe_dump(AUDIT_POLICY))
        w = self.work
        self.start(
            "kube-apiserver",
            [
                BIN / "kube-apiserver",
                f"--etcd-servers=http://127.0.0.1:{etcd}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.port}",
                f"--tls-cert-file={w / 'srv.crt'}",
                f"--tls-private-key-file={w / 'srv.key'}",
                f"--client-ca-file={w / 'ca.crt'}",
                f"--token-auth-file={w / 'tokens.csv'}",
                "--authorization-mode=RBAC",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={w / 'sa.pub'}",
                f"--service-account-signing-key-file={w / 'sa.key'}",
                "--service-cluster-ip-range=10.96.0.0/16",
                f"--audit-policy-file={w / 'audit-policy.yaml'}",
                f"--audit-log-path={self.audit_log}",
                "--audit-log-format=json",
                # Debian's etcd is 3.4: no watch progress requests, so a streaming list (client-go's
                # WatchListClient, kwok's informers) fails mid-stream and is retried forever; refused at
                # once, the clients fall back to LIST and WATCH
                "--runtime-config=scheduling.k8s.io/v1beta1=true",
                "--feature-gates=GenericWorkload=true,WatchList=false",
            ],
            env={"GOMEMLIMIT": "6GiB"},
        )
        token_kubeconfig(self.kubeconfig, f"https://127.0.0.1:{self.port}", self.work / "ca.crt", ADMIN_TOKEN, "sim")
        self._wait("kube-apiserver /readyz", lambda: self.get("/readyz") == "ok", 120)
        self.start(
            "kube-controller-manager",
            [
                BIN / "kube-controller-manager",
                f"--kubeconfig={self.kubeconfig}",
                "--leader-elect=false",
                f"--service-account-private-key-file={w / 'sa.key'}",
                f"--root-ca-file={w / 'ca.crt'}",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                "--service-cluster-ip-range=10.96.0.0/16",
                f"--authentication-kubeconfig={self.kubeconfig}",
                f"--authorization-kubeconfig={self.kubeconfig}",
                *GANG,
            ],
        )
        self.start(
            "kube-scheduler",
            [
                BIN / "kube-scheduler",
                f"--kubeconfig={self.kubeconfig}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                f"--authentication-kubeconfig={self.kubeconfig}",
                f"--authorization-kubeconfig={self.kubeconfig}",
                *GANG,
            ],
        )
        self.start(
            "kwok",
            [
                KWOK_DIR / "kwok",
                f"--kubeconfig={self.kubeconfig}",
                f"--config={KWOK_DIR / 'stages.yaml'}",
                "--manage-nodes-with-label-selector=" + "=".join(KWOK_NODE),
                "--cidr=10.64.0.1/12",
                "--node-ip=10.63.0.1",
                # nodes keep a Lease as kubelets do (without the flag kwok holds none: its heartbeat
                # stage renews their status every 10 min, and the node lifecycle controller marks them
                # NotReady after 50 s, evicting their pods)
                "--node-lease-duration-seconds=40",
            ],
        )
        (w / "Corefile").write_text(
            COREFILE.format(ip=self.dns_ip, kubeconfig=self.kubeconfig, metrics=self.dns_metrics)
        )
        self.start("coredns", [BIN / "coredns", "-conf", w / "Corefile"])
        from kubernetes import config

        self.api = config.new_client_from_config(str(self.kubeconfig))
        self._add_nodes()
        self._wait("CoreDNS metrics", lambda: bool(self.dns_requests() is not None), 60)

    def down(self) -> None:
        with self._starting:
            self.closed = True
        for p in [*self.tasks, *self.agents.values()]:  # task()'s launchers, if their caller did not stop them
            if p.poll() is None:
                p.terminate()
        # one after another, the last started first: kube-apiserver stopped with etcd gone waited
        # past 40 s on its storage; stopped before etcd it is gone in about a second (measured,
        # the whole cluster 1.4 s against the 30 s all at once took)
        for p in reversed(list(self.procs.values())):
            if p.poll() is None:
                p.terminate()
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def stalled(self) -> str | None:
        """Why the cluster can no longer make progress, if it cannot: etcd's database is full."""
        log = self.work / "kube-apiserver.log"
        if not log.exists():
            return None
        with open(log, "rb") as f:
            f.seek(max(0, log.stat().st_size - 200000))
            tail = f.read().decode(errors="replace")
        if "mvcc: database space exceeded" in tail:
            return f"etcd's database is full (mvcc: database space exceeded, at {self.etcd_db_bytes() / 1e6:.0f} MB)"
        return None

    def check_alive(self) -> None:
        dead = [n for n, p in self.procs.items() if p.poll() is not None]
        if dead:
            tail = (self.work / f"{dead[0]}.log").read_text()[-2000:]
            raise RuntimeError(f"{', '.join(dead)} exited; the end of {dead[0]}.log:\n{tail}")

    def _wait(self, what: str, ready, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            self.check_alive()
            try:
                if ready():
                    return
            except Exception:  # noqa: BLE001 - not up yet, until the deadline
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} not ready after {timeout:.0f}s (logs in {self.work})")
            time.sleep(0.5)

    def _add_nodes(self) -> None:
        from kubernetes import client

        core = client.CoreV1Api(self.api)
        for i in range(self.nodes):
            core.create_node(
                client.V1Node(
                    metadata=client.V1ObjectMeta(
                        name=f"kwok-node-{i}",
                        labels={
                            KWOK_NODE[0]: KWOK_NODE[1],
                            "type": "kwok",
                            "kubernetes.io/hostname": f"kwok-node-{i}",
                            "topology.kubernetes.io/zone": f"zone-{i % 4}",
                        },
                    ),
                    status=client.V1NodeStatus(
                        allocatable={"cpu": "32", "memory": "256Gi", "pods": str(self.node_pods)},
                        capacity={"cpu": "32", "memory": "256Gi", "pods": str(self.node_pods)},
                    ),
                )
            )

        def ready() -> bool:
            nodes = core.list_node().items
            return len(nodes) == self.nodes and all(
                any(c.type == "Ready" and c.status == "True" for c in (n.status.conditions or [])) for n in nodes
            )

        self._wait(f"{self.nodes} kwok nodes Ready", ready, 120)

    # ------------------------------------------------------------------ reading it

    def get(self, path: str, accept: str = "*/*") -> str:
        ctx = ssl.create_default_context(cafile=str(self.work / "ca.crt"))
        req = urllib.request.Request(
            f"https://127.0.0.1:{self.port}{path}", headers={"Authorization": f"Bearer {ADMIN_TOKEN}", "Accept": accept}
        )
        with urllib.request.urlopen(req, timeout=30, context=ctx) as r:
            return r.read().decode()

    def config_map(self, namespace: str, name: str) -> dict:
        """A ConfigMap's data (read once: the chart's are immutable)."""
        key = (namespace, name)
        if key not in self.config_maps:
            self.config_maps[key] = (
                json.loads(self.get(f"/api/v1/namespaces/{namespace}/configmaps/{name}")).get("data") or {}
            )
        return self.config_maps[key]

    def pod_table(self, namespace: str) -> list[dict]:
        """The namespace's pods as `kubectl get pods -o wide` has them, a dict a pod by column (a
        server-side Table: a few hundred bytes a pod, where a pod object is KBs)."""
        accept = "application/json;as=Table;v=v1;g=meta.k8s.io"
        resp = json.loads(self.get(f"/api/v1/namespaces/{namespace}/pods?includeObject=None", accept=accept))
        names = [c["name"] for c in resp["columnDefinitions"]]
        return [dict(zip(names, row["cells"], strict=False)) for row in resp.get("rows") or []]

    def apiserver_requests(self) -> dict[tuple[str, str], float]:
        """apiserver_request_total summed by (verb, resource)."""
        out: dict[tuple[str, str], float] = {}
        for labels, v in counters(self.get("/metrics"), "apiserver_request_total").items():
            d = dict(labels)
            key = (d.get("verb", ""), d.get("resource", "") + ("/" + d["subresource"] if d.get("subresource") else ""))
            out[key] = out.get(key, 0.0) + v
        return out

    def dns_requests(self) -> float | None:
        """Every query CoreDNS has answered (coredns_dns_requests_total, all labels)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.dns_metrics}/metrics", timeout=10) as r:
                text = r.read().decode()
        except OSError:
            return None
        return sum(counters(text, "coredns_dns_requests_total").values())

    def list_bytes(self) -> float:
        """Bytes the API server has sent in answer to LISTs (apiserver_response_sizes_sum, every
        resource): the launchers' LISTs are the only ones while they start."""
        return sum(
            v
            for labels, v in counters(self.get("/metrics"), "apiserver_response_sizes_sum").items()
            if dict(labels).get("verb") == "LIST"
        )

    def lose_node(self, node: str, lost: bool = True) -> None:
        """`node` lost as a dead kubelet's is to the control plane (KWOK_NODE: kwok forgets it, so nothing
        renews its Lease, reports its status or ends its pods), or back (`lost=False`: kwok plays it
        again, renews its Lease and reports it Ready)."""
        from kubernetes import client

        value = "lost" if lost else KWOK_NODE[1]
        client.CoreV1Api(self.api).patch_node(node, {"metadata": {"labels": {KWOK_NODE[0]: value}}})

    def nodes_not_ready(self) -> int:
        from kubernetes import client

        return sum(
            1
            for n in client.CoreV1Api(self.api).list_node(_request_timeout=60).items
            if not any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])
        )

    def etcd_db_bytes(self) -> int:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.etcd_port}/metrics", timeout=10) as r:
            return int(sum(counters(r.read().decode(), "etcd_mvcc_db_total_size_in_bytes").values()))

    def _etcd_range(self, key: str, **options) -> list[dict]:
        """etcd's v3 range request through its JSON gateway: the key-values found (keys and values
        base64); `range_end` (a key) and the other options as etcd's RangeRequest has them."""
        body = {"key": base64.b64encode(key.encode()).decode(), **options}
        if "range_end" in body:
            body["range_end"] = base64.b64encode(body["range_end"].encode()).decode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.etcd_port}/v3/kv/range", data=json.dumps(body).encode())
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read()).get("kvs") or []

    def etcd_first_key(self, prefix: str) -> str | None:
        """The first key under `prefix` in etcd (keys only): a pod's name when the API server no longer
        answers, as after etcd filled."""
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        kvs = self._etcd_range(prefix, range_end=end, limit=1, keys_only=True)
        return base64.b64decode(kvs[0]["key"]).decode() if kvs else None

    def etcd_value_bytes(self, key: str) -> int:
        """The size of the value etcd stores under `key` (e.g. /registry/pods/<ns>/<name>: the API
        server's protobuf of the object)."""
        kvs = self._etcd_range(key)
        if not kvs:
            raise RuntimeError(f"etcd holds no {key}")
        return len(base64.b64decode(kvs[0]["value"]))

    def audit(self, user: str, since: float = 0.0, until: float = float("inf")) -> list[dict]:
        """The audit events of `user`'s requests received in [since, until) (epoch seconds), one per
        request (a watch: its ResponseStarted; others: ResponseComplete)."""
        from datetime import datetime

        out, seen = [], set()
        if not self.audit_log.exists():
            return out
        for line in self.audit_log.read_text().splitlines():
            e = json.loads(line)
            if e.get("user", {}).get("username") != user or e["auditID"] in seen:
                continue
            if e["stage"] not in ("ResponseStarted", "ResponseComplete"):
                continue
            at = datetime.fromisoformat(e["requestReceivedTimestamp"].replace("Z", "+00:00")).timestamp()
            if since <= at < until:
                seen.add(e["auditID"])
                out.append(e)
        return out

    def task(
        self, pod: dict, launcher: Path, program: list[str], workdir: Path, extra_env: dict | None = None
    ) -> subprocess.Popen:
        """The real launcher for one of this cluster's (kwok) pods, as its container would run it:
        its pod's environment, its service account's token, the API server, and a mount namespace
        whose /etc/resolv.conf is the pod's (its namespace's search domains, this CoreDNS). Its
        output (stdout and stderr, lines) on the process' stdout."""
        with self._starting:
            self._open()  # refused before its token and files are made, and again as it starts
        namespace, sa = pod["metadata"]["namespace"], pod["spec"]["serviceAccountName"]
        # a token bound to the pod, as the kubelet projects one: the audit log then names the pod
        # each request came from (tests/bench/sim_audit.POD_NAME), where the account alone is every task's
        sa_dir = workdir / f"sa-{namespace}-{pod['metadata']['name']}"
        if not (sa_dir / "token").exists():
            sa_dir.mkdir(parents=True, exist_ok=True)
            (sa_dir / "token").write_text(self.token(namespace, sa, pod=pod))
            (sa_dir / "ca.crt").write_text((self.work / "ca.crt").read_text())
        resolv = workdir / f"resolv-{namespace}.conf"
        resolv.write_text(
            f"search {namespace}.svc.cluster.local svc.cluster.local cluster.local\n"
            f"nameserver {self.dns_ip}\noptions ndots:5\n"
        )
        env = {
            **pod_env(pod, lambda name: self.config_map(namespace, name)),
            "PATH": os.environ["PATH"],
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(self.port),
            "TF_CLUSTER_SA_DIR": str(sa_dir),
        }
        env.pop("TF_CLUSTER_METRICS_PORT", None)  # a port per pod in a cluster; these share a host
        env.update(extra_env or {})
        in_pod_dns = ["unshare", "-m", "sh", "-c", f'mount --bind "{resolv}" /etc/resolv.conf && exec "$@"', "sh"]
        with self._starting:
            self._open()
            if env.get("TF_CLUSTER_AGENT_DIR"):
                # as in the pod: the tf-cluster-agent sidecar holds the token and tells the task in a folder
                agent_dir = workdir / f"agent-{pod['metadata']['name']}"
                agent_dir.mkdir(parents=True, exist_ok=True)
                env["TF_CLUSTER_AGENT_DIR"] = str(agent_dir)
                agent_log = (workdir / f"agent-{pod['metadata']['name']}.log").open("w")
                agent = subprocess.Popen(
                    [*in_pod_dns, sys.executable, str(launcher), "--agent"], env=env, stdout=agent_log, stderr=agent_log
                )
                self.agents[pod["metadata"]["name"]] = agent  # a lost node's are killed with its task (bench_sim.py)
                env = {**env, "TF_CLUSTER_SA_DIR": str(workdir / "no-token")}  # the training container has none
            task = subprocess.Popen(
                [*in_pod_dns, sys.executable, str(launcher), "--", *program],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            self.tasks.append(task)
        if env.get("TF_CLUSTER_AGENT_DIR"):

            def stop_agent_after_task() -> None:  # the kubelet stops a native sidecar once the pod's container ends
                task.wait()
                agent.terminate()

            threading.Thread(target=stop_agent_after_task, daemon=True).start()
        return task

    def token(self, namespace: str, service_account: str, seconds: int = 7200, pod: dict | None = None) -> str:
        """A token of the service account, bound to `pod` when given (valid while that pod exists)."""
        from kubernetes import client

        bound = None
        if pod is not None:
            meta = pod["metadata"]
            bound = client.V1BoundObjectReference(api_version="v1", kind="Pod", name=meta["name"], uid=meta["uid"])
        req = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(
                audiences=["https://kubernetes.default.svc.cluster.local"],
                expiration_seconds=seconds,
                bound_object_ref=bound,
            )
        )
        return (
            client.CoreV1Api(self.api)
            .create_namespaced_service_account_token(service_account, namespace, req)
            .status.token
        )
