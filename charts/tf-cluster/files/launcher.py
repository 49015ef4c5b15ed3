"""tf-cluster launcher: wraps a TensorFlow task's command.

Standard library only, so it runs in any image with Python 3.8+.

    python3 launcher.py -- <command> [args...]    run a task
    python3 launcher.py --check                    `helm test`: check the run

1. Waits for the peers its TensorFlow contacts as it starts (peers_needed: under
   MultiWorkerMirrored the coordination service's leader, under ParameterServer the chief
   waits for every task and the others for none; every TF_CONFIG address for a custom
   strategy): it watches their pods through the API until each has an IP, asks CoreDNS for
   each name as a record type nothing else asks for until it knows it, then looks each name
   up once (headless Service DNS). No name is looked up before its pod exists, so no
   NXDOMAIN lands in CoreDNS' cache (30 s with the addon's Corefile) to stall the start.
   Without the API (run-local, a Role that cannot watch pods) it waits on DNS alone. It logs
   the missing peers and why (no pod, not scheduled, no IP) every few seconds; gives up after
   TF_CLUSTER_PEER_TIMEOUT seconds (exit 4).
2. Runs the command, forwarding SIGTERM/SIGINT to it (TF can checkpoint in the
   pod's grace period); a child still running TF_CLUSTER_STOP_GRACE seconds later is
   killed and the launcher exits 128+signal. (In multi-worker runs TensorFlow's
   coordination service catches SIGTERM, so without this a deleted pod trains on
   until the kubelet's SIGKILL and may even exit 0, as measured on a real node.)
   A signalled command that exits 0 did not finish either (it saved and left, as
   TensorFlow's preemption handling does): the launcher exits 128+signal unless the
   leading Job is complete (the run is over). A signal before the command starts (in
   the peer wait) ends the launcher at once with 128+signal: it is the container's
   PID 1, for which the kernel ignores a signal left at its default action.
3. Echoes each new report of Vertex AI's cloudml-hypertune library (the metrics file
   it writes in the pod's /tmp, CLOUD_ML_HP_METRIC_FILE) to its stdout as a
   TF_CLUSTER_METRICS line, so the pod's log carries what the program reported.
4. When TF_CLUSTER_STOP_WITH_LEADER=true (ps, ParameterServer workers, the
   evaluator) it watches the leading Job (chief, else worker) through the
   Kubernetes API with the pod's token (one LIST, then a WATCH request every 5-10 minutes,
   reconnected with backoff after an API outage), from its start (it may end while this task
   waits for its peers); when that Job is Complete it stops the child and exits 0, when it
   Failed, or was deleted or never existed (no Job of that name for
   TF_CLUSTER_LEADER_MISSING_SECONDS, 60), it stops the child and exits 3; when the API refuses
   the token a read of it (no Role), it exits 5 at once: such a task could never end.
   With an interactive coordinator (the chart's notebook.coordinator) there is no
   chief Job: the notebook kernel is the chief and, while it lives, renews a heartbeat in
   the ConfigMap named like the chief Job (TF_CLUSTER_HEARTBEAT; a ConfigMap, not a
   Lease: Argo CD never syncs Leases). The task stops (exit 0) when the kernel marks it
   done, or when it has not renewed it for
   TF_CLUSTER_HEARTBEAT_TIMEOUT seconds (TF_CLUSTER_START_TIMEOUT from this task's
   start while no kernel has renewed it since): a dead kernel never leaves servers
   running forever.

5. When TF_CLUSTER_FENCE_SECONDS > 0 (the chart's nodeLoss.fence), a few tasks (fences: the first
   two of the leading role, the first of each other role, the ParameterServer coordinator) fence
   pods stranded on a lost node: they watch the release's pods (TF_CLUSTER_RELEASE_SELECTOR) and
   every TF_CLUSTER_FENCE_SECONDS mark Failed each one still not finished
   TF_CLUSTER_FENCE_AFTER seconds after its deletion deadline. A live kubelet ends a deleted pod
   by that deadline; one that did not is on a node that no longer answers, and its Job
   (podReplacementPolicy: Failed) replaces it only once it is Failed. This is what Kubernetes'
   PodGC does for a node tainted node.kubernetes.io/out-of-service, without waiting for an admin.
   Should the node come back, its kubelet finds the pod deleted and stops it.
6. When TF_CLUSTER_METRICS_PORT is set (the chart's metrics.enabled) it serves the task's progress
   in the Prometheus text format at GET /metrics on that port (any address): it pipes the child's
   stdout and stderr, copies every byte to its own as it comes (any chunk, unchanged: Keras redraws
   its bar with \r and \b), and reads the complete lines with the rules of
   tooling/tf_cluster/progress.py (Keras' epoch lines and bars, the TF_CLUSTER_* protocol, the
   TF_CLUSTER_METRICS lines of 3.); tests/progress-corpus holds both readers to the same readings.
   Every series is a gauge labelled release, role, index, run (TF_CLUSTER_RELEASE, TF_CLUSTER_ROLE,
   JOB_COMPLETION_INDEX or TF_TASK_INDEX, TF_CLUSTER_RUN): tf_cluster_task_state{state=...} (1 for
   the current of waiting_for_peers, training, stopped_by_leader, exited), tf_cluster_task_epoch,
   _epochs, _step, _loss, _metric{name=...}, _steps_per_second, _examples_per_second (each once
   known), _peer_wait_seconds, _last_progress_timestamp_seconds, _start_timestamp_seconds and
   _index_failures (TF_CLUSTER_INDEX_FAILURES: the pod's job-index-failure-count annotation).
   Without it the child writes to the launcher's own stdout and stderr, as it always did.

Exit codes:
    0     the command succeeded, or the leading Job completed and the child was stopped
          (or had completed before this task started: a late replacement exits at once),
          or the interactive coordinator said done or went silent (its heartbeat)
    3     the leading Job failed, or no longer exists; this task was stopped (fails this Job at once)
    4     peers did not resolve within TF_CLUSTER_PEER_TIMEOUT (fails this Job at once)
    5     the launcher was misconfigured (no command, unreadable TF_CONFIG, a token that may not
          read the leading Job)
    6     the ParameterServer coordinator stopped because a peer was lost with its node (fenced):
          its Job starts it again and it resumes from its checkpoint (retried, not fatal)
    N     otherwise the command's own exit code; 128+signal if it was killed, or stopped by a
          signal before the run was over (even when it then exited 0)

Environment (set by the chart): TF_CONFIG, TF_CLUSTER_ROLE, TF_TASK_INDEX,
TF_CLUSTER_NAMESPACE, TF_CLUSTER_LEADER_JOB, TF_CLUSTER_STOP_WITH_LEADER,
TF_CLUSTER_WAIT_FOR_PEERS, TF_CLUSTER_PEER_TIMEOUT, TF_CLUSTER_POLL_SECONDS,
TF_CLUSTER_STOP_GRACE, TF_CLUSTER_FENCE_SECONDS, TF_CLUSTER_FENCE_AFTER,
TF_CLUSTER_RELEASE_SELECTOR, TF_CLUSTER_METRICS_PORT, TF_CLUSTER_RELEASE, TF_CLUSTER_RUN,
TF_CLUSTER_INDEX_FAILURES; with an interactive coordinator TF_CLUSTER_HEARTBEAT,
TF_CLUSTER_START_TIMEOUT, TF_CLUSTER_HEARTBEAT_TIMEOUT. When TF_NUM_INTRAOP_THREADS is set (the chart derives it
from the CPU limit) and TF_NUM_INTEROP_THREADS is not, the child gets
TF_NUM_INTEROP_THREADS=max(2, intra-op). For runs outside Kubernetes (tf-cluster run-local),
TF_CLUSTER_LEADER_STATUS_FILE replaces the API: a file holding the leading
Job's condition (Complete / Failed), empty while it runs.
"""
import codecs
import http.client
import json
import math
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

EXIT_LEADER_FAILED = 3
EXIT_PEERS_TIMEOUT = 4
EXIT_CONFIG = 5
EXIT_PEER_LOST = 6  # the ParameterServer coordinator restarts after a peer's node was lost

SA_DIR = os.environ.get("TF_CLUSTER_SA_DIR", "/var/run/secrets/kubernetes.io/serviceaccount")
SUCCESS = ("Complete", "SuccessCriteriaMet")
FAILURE = ("Failed", "FailureTarget")
ABANDONED = "Abandoned"  # an interactive coordinator stopped renewing its heartbeat (kernel gone)
GONE = "Gone"  # the leading Job was deleted before it finished, or never existed
UNWATCHABLE = "Unwatchable"  # the API refused this task's token a read of the leading Job
# Seconds a watched leading Job may be absent before a follower calls it gone: Helm and Argo CD
# create a release's Jobs within a second of each other, so a pod never starts long before it.
LEADER_MISSING_SECONDS = int(os.environ.get("TF_CLUSTER_LEADER_MISSING_SECONDS", "60")) if os.environ.get(
    "TF_CLUSTER_LEADER_MISSING_SECONDS", "60").isdigit() else 60
STARTED = time.time()  # wall clock: compared with the heartbeat's renewTime


def env(name, default=""):
    return os.environ.get(name, default)


def task_name():
    return "%s-%s" % (env("TF_CLUSTER_ROLE", "task"), env("TF_TASK_INDEX", "0"))


def log(msg):
    sys.stderr.write("[launcher %s] %s\n" % (task_name(), msg))
    sys.stderr.flush()


class Stopped(Exception):
    """SIGTERM or SIGINT arrived before the command started: the launcher ends at once (it is the
    container's PID 1, for which the kernel ignores a signal left at its default action)."""

    def __init__(self, signum):
        Exception.__init__(self, signum)
        self.signum = signum


class ConfigError(Exception):
    pass


def peer_hosts(tf_config):
    """Every host named in TF_CONFIG's cluster, roles in name order, tasks in index order, without
    duplicates."""
    cluster = cluster_of(tf_config)
    hosts = []
    for role in sorted(cluster):
        for address in cluster[role]:
            host = host_of(address)
            if host not in hosts:
                hosts.append(host)
    return hosts


def resolves(host):
    try:
        socket.getaddrinfo(host, None)
        return True
    except (socket.gaierror, UnicodeError):
        return False


def cluster_of(tf_config):
    """TF_CONFIG's cluster as {role: [address, ...]} (a dict of index -> address kept in index order)."""
    try:
        cluster = json.loads(tf_config).get("cluster", {}) if tf_config else {}
    except ValueError as e:
        raise ConfigError("TF_CONFIG is not valid JSON: %s" % e)
    out = {}
    for role, tasks in cluster.items():
        if isinstance(tasks, dict):
            tasks = [tasks[k] for k in sorted(tasks, key=lambda k: int(k) if str(k).isdigit() else k)]
        out[role] = list(tasks)
    return out


def host_of(address):
    return address.rsplit(":", 1)[0]


def peers_needed(tf_config, strategy, role):
    """The hosts of TF_CONFIG this task's TensorFlow contacts as it starts: the ones to wait for.

    MultiWorkerMirrored: every task first connects to the coordination service on the leader
    (the chief, else worker 0), whose start-up barrier holds them until all have connected; only
    then do workers reach each other (collective group and device resolution, the all-reduce), so
    a non-leader waits for the leader alone and the leader (a client of its own service) for
    itself. ParameterServer: the coordinator (the chief) connects to every worker and ps; workers
    and ps servers contact nobody until the coordinator sends them work, so they start at once.
    A custom strategy: every host (nothing is known of its program)."""
    cluster = cluster_of(tf_config)
    if strategy == "multiWorkerMirrored":
        leader = (cluster.get("chief") or cluster.get("worker") or [None])[0]
        return [host_of(leader)] if leader and role in cluster else []
    if strategy == "parameterServer":
        return peer_hosts(tf_config) if role == "chief" else []
    return peer_hosts(tf_config)


def wait_for_peers(hosts, timeout, interval=5.0, give_up=None):
    """Wait on DNS alone (outside Kubernetes, or when the API cannot be read): return [] when
    all resolve, else the hosts still missing at the timeout (or when `give_up()` says the wait is
    pointless: the leading Job already finished)."""
    start = time.monotonic()
    last_log = start
    missing = list(hosts)
    while True:
        missing = [h for h in missing if not resolves(h)]
        if not missing:
            log("all %d peer(s) resolve after %.1fs" % (len(hosts), time.monotonic() - start))
            return []
        now = time.monotonic()
        if now - start >= timeout:
            return missing
        if now - last_log >= interval:
            if give_up is not None and give_up():
                return missing
            log("waiting for %d/%d peer(s) to resolve (%ds/%ds): %s" % (
                len(missing), len(hosts), now - start, timeout, ", ".join(missing[:10])
                + (" ..." if len(missing) > 10 else "")))
            last_log = now
        time.sleep(min(1.0, max(0.05, timeout / 50.0)))


def pod_host(pod):
    """The DNS host a pod publishes through the release's headless Service: <hostname>.<subdomain>."""
    spec = pod.get("spec", {})
    return "%s.%s" % (spec.get("hostname"), spec.get("subdomain")) if spec.get("hostname") else None


def backs(pod, host):
    """Is `pod` the one behind `host` (<hostname>.<subdomain>, maybe followed by the namespace...)?"""
    ph = pod_host(pod)
    return bool(ph) and (host == ph or host.startswith(ph + "."))


def why_missing(host, pods):
    """Why the pod behind `host` has no DNS name yet, in words (for the wait's log)."""
    found = [p for p in pods if backs(p, host)]
    if not found:
        return "no pod yet"
    pod = found[-1]
    if pod.get("metadata", {}).get("deletionTimestamp"):
        return "its pod is being deleted"
    for c in pod.get("status", {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            return "not scheduled: %s" % (c.get("message") or c.get("reason") or "?")
    return "on node %s, no IP yet" % pod.get("spec", {}).get("nodeName", "?")


def slim_pod(pod):
    """What the launcher reads of a pod (the peer wait, the fence): a pod's spec carries TF_CONFIG,
    ~120 KB at 4096 tasks, which a watch of the release's pods must not keep for each."""
    meta, spec, status = pod.get("metadata", {}), pod.get("spec", {}), pod.get("status", {})
    return {
        "metadata": {k: meta[k] for k in ("name", "deletionTimestamp", "resourceVersion") if k in meta},
        "spec": {k: spec[k] for k in ("hostname", "subdomain", "nodeName") if k in spec},
        "status": {k: status[k] for k in ("phase", "reason", "podIP", "conditions") if k in status},
    }


def host_key(host):
    """<hostname>.<service> of a TF_CONFIG host (which may go on with the namespace and domain)."""
    return ".".join(host.split(".")[:2])


def pod_keys(pods):
    """The hosts (<hostname>.<service>) backed by a live pod with an IP: the EndpointSlice
    controller has put each in the headless Service (it publishes not-ready addresses), and
    CoreDNS answers for it."""
    return {pod_host(p) for p in pods if pod_host(p) and p.get("status", {}).get("podIP")
            and not p.get("metadata", {}).get("deletionTimestamp")}


def published(host, pods):
    """Is `host` backed by a live pod with an IP (pod_keys)?"""
    return host_key(host) in pod_keys(pods)


PROBE_OFFSET = int.from_bytes(os.urandom(1), "big")  # tasks probing one name start at different types


def resolv_conf(path="/etc/resolv.conf"):
    """(nameservers, search domains, ndots) of the pod's resolver."""
    servers, search, ndots = [], [], 1
    try:
        with open(path) as f:
            for line in f:
                words = line.split()
                if not words or words[0].startswith(("#", ";")):
                    continue
                if words[0] == "nameserver" and len(words) > 1:
                    servers.append(words[1])
                elif words[0] in ("search", "domain"):
                    search = words[1:]
                elif words[0] == "options":
                    for w in words[1:]:
                        if w.startswith("ndots:") and w[6:].isdigit():
                            ndots = int(w[6:])
    except OSError:
        pass
    return servers, search, ndots


def dns_rcode(server, name, qtype, timeout=1.0):
    """One DNS query (RFC 1035, UDP) for `name`'s records of `qtype`: the response code
    (0 NOERROR, 3 NXDOMAIN), or None without an answer."""
    import random
    import struct
    qid = random.randint(0, 0xFFFF)
    try:
        question = b"".join(bytes([len(p)]) + p.encode("idna") for p in name.rstrip(".").split("."))
        packet = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0) + question + b"\0" + struct.pack(">HH", qtype, 1)
        family = socket.AF_INET6 if ":" in server else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.settimeout(timeout)
            sock.sendto(packet, (server, 53))
            reply = sock.recv(4096)
    except (OSError, UnicodeError, ValueError):
        return None
    if len(reply) < 4 or struct.unpack(">H", reply[:2])[0] != qid:
        return None
    return reply[3] & 0xF


# RFC 6895's private-use record types: no program asks for them, and CoreDNS answers NOERROR (no
# data) for a name it knows, NXDOMAIN for one it does not. Each probe asks a type not asked before,
# so an NXDOMAIN it gets (cached for the negative TTL, per name and type) never answers a later probe,
# nor TensorFlow's A and AAAA lookups.
PROBE_TYPES = list(range(65280, 65535))


def name_exists(host, attempt=0):
    """Does the cluster's DNS know `host` yet, asked so that no A or AAAA answer gets cached: True,
    False, or None (no resolver to ask, no answer)? Names are tried as the resolver would, through
    its search domains; `attempt` picks the record type asked (a new one per attempt)."""
    servers, search, ndots = resolv_conf()
    if not servers:
        return None
    names = [host + "." + d for d in search]
    names = ([host] + names) if host.count(".") >= ndots else (names + [host])
    qtype = PROBE_TYPES[(PROBE_OFFSET + attempt) % len(PROBE_TYPES)]
    codes = []
    for name in names:
        codes.append(dns_rcode(servers[0], name, qtype))
        if codes[-1] == 0:
            return True
    return False if all(c == 3 for c in codes) else None


def index_selector(host):
    """A label selector for the pod behind one host: an Indexed Job's pod hostname is <job>-<index>."""
    job, _, index = host.split(".")[0].rpartition("-")
    if job and index.isdigit():
        return "batch.kubernetes.io/job-name=%s,batch.kubernetes.io/job-completion-index=%s" % (job, index)
    return None


def peer_selector(hosts):
    """A label selector for the pods behind `hosts`: the one Job index's pods for one host, the
    release's pods for more."""
    if len(hosts) == 1 and index_selector(hosts[0]):
        return index_selector(hosts[0])
    return env("TF_CLUSTER_RELEASE_SELECTOR")


def endpoint_keys(slices):
    """The hosts (<hostname>.<service>) among a headless Service's EndpointSlices that CoreDNS
    serves: with an address, and ready (with publishNotReadyAddresses, every address is)."""
    return {"%s.%s" % (e["hostname"], s.get("metadata", {}).get("labels", {}).get("kubernetes.io/service-name"))
            for s in slices for e in s.get("endpoints") or []
            if e.get("hostname") and e.get("addresses") and (e.get("conditions") or {}).get("ready") is not False}


def peer_service(hosts):
    """The headless Service every one of `hosts` (<hostname>.<service>...) belongs to, if one."""
    services = {h.split(".")[1] if h.count(".") else "" for h in hosts}
    return services.pop() if len(services) == 1 and "" not in services else None


def why_unpublished(namespace, host):
    """Why `host` is not among its Service's endpoints yet, in words: its pod read on its own (one
    request, made only for the wait's log)."""
    selector = index_selector(host)
    if not selector:
        return "not published yet"
    from urllib.parse import quote
    try:
        path = "/api/v1/namespaces/%s/pods?labelSelector=%s&resourceVersion=0" % (namespace, quote(selector))
        pods = api(path).get("items") or []
    except (ConfigError, urllib.error.URLError, OSError, ValueError, http.client.HTTPException):
        return "not published yet"
    return why_missing(host, pods)


def wait_for_peer_pods(hosts, timeout, interval=5.0, give_up=None, settle=1.0):
    """Wait until `hosts` are published, learnt through the API (one LIST, then one WATCH), then
    check each name in DNS once. One peer: its pod, watched by its Job index. More: their headless
    Service's EndpointSlices, which CoreDNS itself serves from (a hundred addresses a slice, where
    a pod carries TF_CONFIG: ~120 KB each at 4096 tasks). No name is looked up before it is
    published, so no lookup leaves an NXDOMAIN in CoreDNS' cache (30 s with the addon's Corefile)
    to stall the start. Returns the hosts still missing (as wait_for_peers), or None when the API
    cannot be read (no Kubernetes, RBAC without watch on pods or EndpointSlices): the caller waits
    on DNS instead."""
    namespace = env("TF_CLUSTER_NAMESPACE")
    service = peer_service(hosts) if len(hosts) > 1 else None
    selector = peer_selector(hosts)
    if not env("KUBERNETES_SERVICE_HOST") or not namespace or not (service or selector):
        return None
    if service:
        what = "endpoints"
        pods = Informer("/apis/discovery.k8s.io/v1/namespaces/%s/endpointslices" % namespace,
                        label_selector="kubernetes.io/service-name=" + service, name="peer endpoints")
        keys = endpoint_keys

        def why(h, _current):
            return why_unpublished(namespace, h)
    else:
        what = "pods"
        pods = Informer("/api/v1/namespaces/%s/pods" % namespace, label_selector=selector, name="peer pods",
                        keep=slim_pod)
        keys, why = pod_keys, why_missing
    pods.start()
    start = time.monotonic()
    last_log = start
    seen = {}  # host -> when its pod was first seen with an IP (monotonic; 0: in the first LIST)
    first = True
    try:
        while True:
            if pods.forbidden:
                log("cannot watch the peers' pods (%s): waiting on DNS instead" % pods.forbidden)
                return None
            now = time.monotonic()
            if not pods.synced.is_set():
                if now - start > 15:
                    log("cannot read the peers' pods (%s): waiting on DNS instead" % pods.error)
                    return None
                pods.wait_for_change(1.0)
                continue
            current = pods.snapshot()
            known = keys(current)
            for h in hosts:
                if h not in seen and host_key(h) in known:
                    seen[h] = 0.0 if first else now
            first = False
            missing = [h for h in hosts if h not in seen]
            if not missing:
                break
            if now - start >= timeout:
                return missing
            if now - last_log >= interval:
                if give_up is not None and give_up():
                    return missing
                shown = 10 if what == "pods" else 3  # endpoints: each reason is a request
                waiting = "waiting for %d/%d peer pod(s) (%ds/%ds): %s" % (
                    len(missing), len(hosts), now - start, timeout, "; ".join(
                        "%s (%s)" % (h, why(h, current)) for h in missing[:shown])
                    + (" ..." if len(missing) > shown else ""))
                log(waiting)
                EVENTS.record("WaitingForPeers", waiting)
                last_log = now
            pods.wait_for_change(min(interval, max(0.05, start + timeout - now)))
    finally:
        pods.stop()
    # CoreDNS learns a name from the EndpointSlice the controller writes when it sees the pod's IP,
    # as we do, a moment later: ask for the name as a record type TensorFlow never asks for (a new
    # one each time: PROBE_TYPES) until CoreDNS knows it, then look it up once
    deadline = time.monotonic() + max(settle, 10.0)
    pending = list(hosts)
    attempt = 0
    while pending and time.monotonic() < deadline:
        known = {h: name_exists(h, attempt) for h in pending}
        attempt += 1
        if any(v is None for v in known.values()):  # no answer to read: give it `settle` seconds
            time.sleep(max(0.0, max(seen.values()) + settle - time.monotonic()))
            break
        pending = [h for h, v in known.items() if not v]
        if pending:
            time.sleep(0.2)
    late = [h for h in hosts if not resolves(h)]
    if not late:
        log("all %d peer(s) resolve after %.1fs (their %s watched first: %d API request(s), %d lookup(s))"
            % (len(hosts), time.monotonic() - start, what, pods.requests, len(hosts)))
        return []
    log("%d peer pod(s) have an IP but DNS does not answer for them yet: %s; waiting on DNS (a headless "
        "Service that does not publish not-ready addresses, or a slow EndpointSlice controller)"
        % (len(late), ", ".join(late[:10])))
    return wait_for_peers(late, max(1.0, timeout - (time.monotonic() - start)), interval, give_up)


# ------------------------------------------------------------ leader status

def api_open(path, method="GET", body=None, content_type="application/merge-patch+json", timeout=10):
    """One Kubernetes API request with the pod's service account token: the open response."""
    host, port = env("KUBERNETES_SERVICE_HOST"), env("KUBERNETES_SERVICE_PORT", "443")
    if not host:
        raise ConfigError("not in a Kubernetes pod (KUBERNETES_SERVICE_HOST unset) and "
                          "TF_CLUSTER_LEADER_STATUS_FILE not given")
    if ":" in host:
        host = "[%s]" % host
    with open(os.path.join(SA_DIR, "token")) as f:
        token = f.read().strip()
    ctx = ssl.create_default_context(cafile=os.path.join(SA_DIR, "ca.crt"))
    headers = {"Authorization": "Bearer " + token, "Accept": "application/json"}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = content_type
    req = urllib.request.Request("https://%s:%s%s" % (host, port, path), data=data, headers=headers,
                                 method=method)
    return urllib.request.urlopen(req, timeout=timeout, context=ctx)


def api(path, method="GET", body=None, content_type="application/merge-patch+json"):
    """One Kubernetes API call with the pod's service account token; the decoded JSON answer."""
    with api_open(path, method, body, content_type) as resp:
        return json.load(resp)


class Events:
    """Kubernetes Events on this task's pod for the lifecycle moments a platform's tools read
    (`kubectl describe pod`, `kubectl events`, Argo CD, event exporters): one Event per reason,
    its count and message updated in place when the moment recurs (at most once every
    EVERY seconds per reason), so a wait of an hour is one Event, not hundreds. Without a token or
    a pod name (run-local, rbac off) it does nothing; a refused request is logged once, then it
    stops trying: the task's work never depends on an Event."""

    EVERY = 30.0

    def __init__(self):
        self.on = None  # decided at the first record: the environment is read then
        self.sent = {}  # reason -> [count, last update (monotonic)]
        self.lock = threading.Lock()

    def record(self, reason, message, warning=False):
        if self.on is None:
            self.pod, self.namespace = env("TF_CLUSTER_POD_NAME"), env("TF_CLUSTER_NAMESPACE")
            self.on = bool(self.pod and self.namespace and os.path.exists(os.path.join(SA_DIR, "token")))
        if not self.on:
            return
        with self.lock:
            count, last = self.sent.get(reason, [0, 0.0])
            now = time.monotonic()
            if count and now - last < self.EVERY:
                self.sent[reason][0] = count + 1  # counted; sent with the next update
                return
            self.sent[reason] = [count + 1, now]
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            name = "%s.tf-cluster-%s" % (self.pod, reason.lower())
            path = "/api/v1/namespaces/%s/events" % self.namespace
            try:
                if not count:
                    api(path, method="POST", body={
                        "metadata": {"name": name},
                        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": self.namespace,
                                           "name": self.pod, "uid": env("TF_CLUSTER_POD_UID") or None},
                        "reason": reason, "message": message[:1024],
                        "type": "Warning" if warning else "Normal",
                        "source": {"component": "tf-cluster-launcher"},
                        "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1},
                        content_type="application/json")
                else:
                    api(path + "/" + name, method="PATCH", body={
                        "message": message[:1024], "lastTimestamp": stamp, "count": count + 1})
            except (urllib.error.URLError, OSError, ValueError) as e:
                self.on = False
                log("cannot record Kubernetes Events (%s): the task goes on; `kubectl logs` has every "
                    "moment" % getattr(e, "code", e))


EVENTS = Events()


class WatchExpired(Exception):
    """The watch's resourceVersion is too old (410 Gone): LIST again."""


def api_watch(path, timeout_seconds, on_open=None):
    """The events of one WATCH request (a JSON object per line) until the server ends it after
    `timeout_seconds` (or the connection drops: the exception reaches the caller). `on_open` gets
    the open response (closing it from another thread ends the watch)."""
    sep = "&" if "?" in path else "?"
    resp = api_open("%s%swatch=1&allowWatchBookmarks=true&timeoutSeconds=%d" % (path, sep, timeout_seconds),
                    timeout=timeout_seconds + 30)
    keepalive(resp)
    if on_open is not None:
        on_open(resp)
    with resp:
        for line in resp:
            if not line.strip():
                continue
            event = json.loads(line)
            if event.get("type") == "ERROR":
                status = event.get("object") or {}
                if status.get("code") == 410:
                    raise WatchExpired(status.get("message", "too old resource version"))
                raise ValueError("watch error: %s" % status.get("message", status))
            yield event


def socket_of(resp):
    """The socket under an open urllib response (None if there is no plain one: a proxy, another
    Python)."""
    try:
        return resp.fp.raw._sock
    except AttributeError:
        return None


def keepalive(resp):
    """TCP keepalives on a watch's connection: a peer that vanished without a reset (a dropped NAT
    entry, a load balancer's idle cut) is found in ~1 minute, not at the watch's end."""
    sock = socket_of(resp)
    if sock is None:
        return  # the watch's own end still bounds it
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for opt, value in (("TCP_KEEPIDLE", 30), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 3)):
            if hasattr(socket, opt):
                sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, opt), value)
    except OSError:
        pass


# One WATCH request lasts this long (randomized, as client-go's reflector does, so that the tasks of
# a large release do not all come back at once); a task's steady state is a request per 5-10 min.
WATCH_SECONDS = (300, 600)


class Informer:
    """A collection's objects kept current: one LIST, then WATCH from its resourceVersion, again
    each time a watch ends (the server's timeout, a dropped connection, an API server restart: with
    backoff up to 30 s); a new LIST only when the resourceVersion is too old (410 Gone). What
    client-go's informer does, for one reader, with the standard library. Counts its requests."""

    def __init__(self, path, label_selector=None, field_selector=None, name="objects", keep=None, page=None,
                 remember_deleted=False):
        from urllib.parse import quote
        self.remember_deleted = remember_deleted  # keep the last state of deleted objects (gone())
        self.keep = keep or (lambda obj: obj)  # what is kept of each object: a release's pods are big
        # page=None: a LIST the API server answers from its watch cache (resourceVersion=0), for the
        # few objects a selector picks. Read from etcd instead, a selector that picks one pod of
        # 4096 has the API server decode all of them (~600 MB): 32 such LISTs at once timed out.
        # page=N: the release's pods, all of them wanted, in pages of N from etcd, so that no one
        # answer is ~600 MB to parse.
        self.page = page
        query = []
        if label_selector:
            query.append("labelSelector=" + quote(label_selector))
        if field_selector:
            query.append("fieldSelector=" + quote(field_selector))
        self.path = path + ("?" + "&".join(query) if query else "")
        self.name = name
        self.items = {}
        self.deleted = {}  # name -> its last state, for objects deleted since they were seen
        self.synced = threading.Event()
        self.synced_at = None  # monotonic time of the first LIST
        self.changed = threading.Condition()
        self.error = None
        self.forbidden = None
        self.requests = 0
        self.clock_offset = None  # the API server's clock minus ours (server_offset), from its last answer
        self._stop = threading.Event()
        self._thread = None
        self._resp = None

    def start(self):
        self._thread = threading.Thread(target=self.run, daemon=True, name="informer " + self.name)
        self._thread.start()
        return self

    def stop(self):
        """Stop watching: the open watch is closed now, not at its end (minutes later)."""
        self._stop.set()
        sock = socket_of(self._resp) if self._resp is not None else None
        if sock is not None:
            try:  # a shutdown wakes the thread blocked reading it (a close would not)
                sock.shutdown(socket.SHUT_RDWR)
            except (OSError, ValueError):
                pass

    def _opened(self, resp):
        self._resp = resp
        offset = server_offset(resp.headers.get("Date"), time.time())
        if offset is not None:
            self.clock_offset = offset
        if self._stop.is_set():
            self.stop()

    def snapshot(self):
        with self.changed:
            return list(self.items.values())

    def wait_for_change(self, timeout):
        with self.changed:
            self.changed.wait(timeout)

    def gone(self):
        """The objects deleted since they were seen, each as it was last seen."""
        with self.changed:
            return dict(self.deleted)

    def _replace(self, items):
        with self.changed:
            if self.remember_deleted:
                for key in set(self.items) - set(items):  # deleted while no watch was open
                    self.deleted[key] = self.items[key]
            self.items = items
            if self.synced_at is None:
                self.synced_at = time.monotonic()
            self.synced.set()
            self.changed.notify_all()

    def _apply(self, kind, obj):
        key = obj.get("metadata", {}).get("name")
        with self.changed:
            if kind == "DELETED":  # its last state: a finished Job deleted at once still says how it ended
                self.items.pop(key, None)
                if self.remember_deleted:
                    self.deleted[key] = obj
            else:
                self.items[key] = obj
            self.changed.notify_all()

    def run(self):
        import random
        rv, backoff, failures = None, 1.0, 0
        while not self._stop.is_set():
            try:
                sep = "&" if "?" in self.path else "?"
                if rv is None:
                    rv = self._list(sep)
                self.requests += 1
                for event in api_watch("%s%sresourceVersion=%s" % (self.path, sep, rv),
                                       random.randint(*WATCH_SECONDS), on_open=self._opened):
                    obj = event.get("object") or {}
                    rv = obj.get("metadata", {}).get("resourceVersion") or rv
                    if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                        self._apply(event["type"], self.keep(obj))
                    if self._stop.is_set():
                        return
                backoff, failures = 1.0, 0
            except WatchExpired:
                rv = None
            except urllib.error.HTTPError as e:
                if e.code == 410:
                    rv = None
                    continue
                if e.code in (401, 403):
                    self.forbidden = "%s %s" % (e.code, e.reason)
                    with self.changed:
                        self.changed.notify_all()
                    return
                failures, backoff = self._failed(e, failures, backoff)
            except (ConfigError, urllib.error.URLError, OSError, ValueError, KeyError, AttributeError,
                    http.client.HTTPException) as e:
                if self._stop.is_set():
                    return  # stop() closed the watch under us
                failures, backoff = self._failed(e, failures, backoff)

    def _list(self, sep):
        """LIST (from the watch cache, or page by page: one snapshot, the pages share its
        resourceVersion; an expired continue token is a 410, and the LIST starts again); returns
        the resourceVersion the WATCH goes on from."""
        from urllib.parse import quote
        items, token = {}, None
        while True:
            self.requests += 1
            if self.page is None:
                data = api("%s%sresourceVersion=0" % (self.path, sep))
            else:
                data = api("%s%slimit=%d%s" % (self.path, sep, self.page, "&continue=" + quote(token) if token else ""))
            for o in data.get("items") or []:
                items[o["metadata"]["name"]] = self.keep(o)
            token = data.get("metadata", {}).get("continue")
            if not token:
                self._replace(items)
                return data.get("metadata", {}).get("resourceVersion")

    def _failed(self, e, failures, backoff):
        import random
        self.error = e
        failures += 1
        if failures == 1 or failures % 10 == 0:
            log("cannot watch %s (%s); retrying (attempt %d)" % (self.name, e, failures))
        self._stop.wait(backoff * (0.5 + random.random()))
        return failures, min(30.0, backoff * 2)


def leader_condition_from_api(namespace, job):
    """The leading Job's finished condition type ("Complete", "Failed", ...) or ""."""
    status = api("/apis/batch/v1/namespaces/%s/jobs/%s" % (namespace, job)).get("status", {})
    return condition_of(status)


def parse_time(text):
    """An RFC 3339 time of the API (renewTime: 2026-11-24T10:00:00.123456Z) as epoch seconds."""
    if not text:
        return None
    import calendar
    base, _, frac = text.rstrip("Z").partition(".")
    try:
        seconds = calendar.timegm(time.strptime(base, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None
    return seconds + (float("0." + frac) if frac.isdigit() else 0.0)


def heartbeat_condition(data, started, now, start_timeout, heartbeat_timeout):
    """What an interactive coordinator's heartbeat (its ConfigMap's data: holderIdentity,
    renewTime, done) says to a server started at `started`: "Complete" once the kernel marked it
    done, ABANDONED when no kernel renewed it for heartbeat_timeout seconds (start_timeout from
    `started` while none has since), else ""."""
    data = data or {}
    if data.get("done"):
        return "Complete"
    renewed = parse_time(data.get("renewTime"))
    if renewed is not None and renewed >= started:
        return ABANDONED if now - renewed > heartbeat_timeout else ""
    if renewed is not None and now - renewed <= heartbeat_timeout:
        return ""  # a kernel renewed it shortly before this task started: it is alive
    return ABANDONED if now - started > start_timeout else ""


def leader_condition_from_heartbeat(namespace, name):
    try:
        data = api("/api/v1/namespaces/%s/configmaps/%s" % (namespace, name)).get("data")
    except urllib.error.HTTPError as e:
        if e.code != 404:
            raise
        data = None  # not created yet: no kernel has connected
    start_timeout = float(env("TF_CLUSTER_START_TIMEOUT", "3600"))
    heartbeat_timeout = float(env("TF_CLUSTER_HEARTBEAT_TIMEOUT", "300"))
    cond = heartbeat_condition(data, STARTED, time.time(), start_timeout, heartbeat_timeout)
    if cond == ABANDONED:
        renewed = parse_time((data or {}).get("renewTime"))
        if renewed is not None and renewed >= STARTED:
            log("the notebook kernel (the coordinator) has not renewed its heartbeat (ConfigMap %s) for "
                "%.0fs (limit %.0fs): it died, was culled or restarted without reconnecting"
                % (name, time.time() - renewed, heartbeat_timeout))
        else:
            log("no notebook kernel connected as coordinator (ConfigMap %s) within %.0fs of this task's start"
                % (name, start_timeout))
    return cond


def condition_of(status):
    """Pick the decisive condition by type (never by position: 1.31+ adds SuccessCriteriaMet)."""
    true_types = [c.get("type") for c in status.get("conditions") or [] if c.get("status") == "True"]
    for t in FAILURE:
        if t in true_types:
            return "Failed"
    for t in SUCCESS:
        if t in true_types:
            return "Complete"
    return ""


def leader_condition():
    path = env("TF_CLUSTER_LEADER_STATUS_FILE")
    if path:
        try:
            with open(path) as f:
                return f.read().strip()
        except OSError:
            return ""
    if env("TF_CLUSTER_HEARTBEAT"):
        return leader_condition_from_heartbeat(env("TF_CLUSTER_NAMESPACE", "default"), env("TF_CLUSTER_HEARTBEAT"))
    return leader_condition_from_api(env("TF_CLUSTER_NAMESPACE", "default"),
                                     env("TF_CLUSTER_LEADER_JOB"))


def leader_name():
    """What this task watches, for the log: the leading Job, or the interactive coordinator's heartbeat."""
    if env("TF_CLUSTER_HEARTBEAT"):
        return "the notebook coordinator (ConfigMap %s)" % env("TF_CLUSTER_HEARTBEAT")
    return "Job %s" % (env("TF_CLUSTER_LEADER_JOB") or "leader")


def say_unwatchable(what, reason):
    log("cannot read %s (%s): this task could never stop with it. The launcher's Role must allow get, "
        "list and watch on it to this pod's ServiceAccount: keep the chart's rbac.create=true, or grant "
        "them yourself" % (what, reason))


def leader_condition_at_start():
    """leader_condition() as a task starts: UNWATCHABLE (said) when the API refuses this token,
    "" when it cannot be read now (the watch retries)."""
    try:
        return leader_condition()
    except urllib.error.HTTPError as e:
        if e.code in (401, 403):
            say_unwatchable(leader_name(), "%s %s" % (e.code, e.reason))
            return UNWATCHABLE
        return ""
    except (ConfigError, urllib.error.URLError, OSError, ValueError):
        return ""


def leader_condition_or_empty():
    """leader_condition(), with "" when the API cannot be read (the caller moves on)."""
    try:
        return leader_condition()
    except (ConfigError, urllib.error.URLError, OSError, ValueError):
        return ""


def watch_leader(poll, on_finished, stop_event):
    """Call on_finished(condition) once the leader has finished. The leading Job is watched (one
    LIST, then one WATCH request per 5-10 minutes: no quorum read every `poll` seconds by every
    server task); the notebook coordinator's heartbeat and run-local's status file are read every
    `poll` seconds (their timeouts need the clock; a notebook release has few servers)."""
    job = leader_name()
    if env("TF_CLUSTER_HEARTBEAT"):
        log("will stop when %s says done, or after %ss without its heartbeat (%ss until a kernel first "
            "connects); checked every %ss" % (job, env("TF_CLUSTER_HEARTBEAT_TIMEOUT", "300"),
                                              env("TF_CLUSTER_START_TIMEOUT", "3600"), poll))
    elif not env("TF_CLUSTER_LEADER_STATUS_FILE"):
        return watch_leader_job(on_finished, stop_event)
    else:
        log("will stop when %s finishes (checked every %ss)" % (job, poll))
    errors = 0
    while not stop_event.wait(poll):
        try:
            cond = leader_condition()
            errors = 0
        except urllib.error.HTTPError as e:
            if e.code in (401, 403):
                say_unwatchable(job, "%s %s" % (e.code, e.reason))
                on_finished(UNWATCHABLE)
                return
            errors += 1
            if errors == 1 or errors % 12 == 0:
                log("cannot read %s yet (%s); retrying" % (job, e))
            continue
        except (urllib.error.URLError, OSError, ValueError) as e:
            errors += 1
            if errors == 1 or errors % 12 == 0:
                log("cannot read %s yet (%s); retrying" % (job, e))
            continue
        if cond:
            log("%s is %s" % (job, cond))
            on_finished(cond)
            return


def leader_outcome(current, deleted, absent_for):
    """What a follower makes of its leading Job as its watch keeps it: "Complete" or "Failed" once
    it finished (read from its last state too when it was deleted: a Job removed right after it
    finished still says how it ended), GONE once no Job of that name has existed for
    LEADER_MISSING_SECONDS (`absent_for`, None while one does: deleted before it finished, or never
    created, so this run cannot end), else "" (running)."""
    for job in current or list(deleted.values()):
        cond = condition_of(job.get("status") or {})
        if cond:
            return cond
    if not current and absent_for is not None and absent_for >= LEADER_MISSING_SECONDS:
        return GONE
    return ""


def watch_leader_job(on_finished, stop_event):
    name = env("TF_CLUSTER_LEADER_JOB")
    jobs = Informer("/apis/batch/v1/namespaces/%s/jobs" % env("TF_CLUSTER_NAMESPACE", "default"),
                    field_selector="metadata.name=%s" % name, name="Job %s" % name,
                    remember_deleted=True).start()
    log("will stop when Job %s finishes (watched)" % name)
    absent_since = None
    try:
        while not stop_event.is_set():
            if jobs.forbidden:
                say_unwatchable("Job %s" % name, jobs.forbidden)
                on_finished(UNWATCHABLE)
                return
            current = jobs.snapshot()
            if current or not jobs.synced.is_set():
                absent_since = None
            elif absent_since is None:
                absent_since = time.monotonic()
            cond = leader_outcome(current, jobs.gone(),
                                  None if absent_since is None else time.monotonic() - absent_since)
            if cond == GONE:
                log("Job %s %s (no Job of that name for %ds)" % (
                    name, "was deleted before it finished" if jobs.gone() else "does not exist",
                    LEADER_MISSING_SECONDS))
                on_finished(cond)
                return
            if cond:
                log("Job %s is %s" % (name, cond))
                on_finished(cond)
                return
            jobs.wait_for_change(1.0)
    finally:
        jobs.stop()


# ------------------------------------------------------------ running

# ------------------------------------------------------------ fencing pods of a lost node

def server_offset(date, local_now):
    """The API server's clock minus this node's, from an answer's Date header (whole seconds:
    the offset is rounded towards the server being behind, so that it never makes a pod look
    stranded sooner), or None when there is none."""
    if not date:
        return None
    from email.utils import parsedate_to_datetime
    try:
        server = parsedate_to_datetime(date).timestamp()
    except (TypeError, ValueError, IndexError):
        return None
    return server - local_now  # the header is truncated to the second: the server's "now" is up to 1 s later


def stranded(pod, now, after):
    """Is `pod` deleted but unfinished `after` seconds past its deletion deadline (no kubelet ended it)?"""
    deadline = parse_time(pod.get("metadata", {}).get("deletionTimestamp") or "")
    phase = pod.get("status", {}).get("phase")
    return deadline is not None and phase not in ("Succeeded", "Failed") and now - deadline >= after


def fence_stranded(namespace, pods, after, now=None):
    """Mark Failed those of `pods` stranded on a lost node; returns their names."""
    now = time.time() if now is None else now
    fenced = []
    for pod in pods:
        if not stranded(pod, now, after):
            continue
        name, node = pod["metadata"]["name"], pod.get("spec", {}).get("nodeName", "?")
        log("fencing %s: deleted but still %s %ds past its deadline, so node %s is not answering; "
            "marking it Failed so its Job replaces it" % (
                name, pod.get("status", {}).get("phase"),
                now - parse_time(pod["metadata"]["deletionTimestamp"]), node))
        message = ("tf-cluster launcher: node %s stopped answering; the pod was deleted and never "
                   "confirmed by its kubelet (fenced)" % node)
        api("/api/v1/namespaces/%s/pods/%s/status" % (namespace, name), method="PATCH",
            body={"status": {"phase": "Failed", "reason": "NodeLost", "message": message}})
        EVENTS.record("FencedPeer", "marked pod %s Failed (NodeLost): node %s stopped answering and the "
                      "pod's deletion was never confirmed; its Job replaces it" % (name, node), warning=True)
        fenced.append(name)
    return fenced


def fences(tf_config, role, index):
    """Is this task one of the release's fencers? A few tasks watch the release's pods, not all (a
    watch of N pods by each of N tasks is N*N events): the first two of the leading role (the
    chief, else the workers) and the first of each other role in TF_CONFIG, so that a fencer
    survives the loss of any one node under a topology spread. The ParameterServer coordinator
    always fences (it restarts when a peer is lost)."""
    cluster = cluster_of(tf_config)
    if role not in cluster:
        return False
    leading = "chief" if cluster.get("chief") else "worker"
    if role == leading and index < 2:
        return True
    return index == 0


def lost_peers(pods, fenced, hosts):
    """The names of `pods` lost with their node (fenced before, reason NodeLost, or just now: in
    `fenced`) that back one of `hosts`, the coordinator's TF_CONFIG: the evaluator, TensorBoard and
    the notebook are not its peers, and their loss is no reason to restart it."""
    keys = {host_key(h) for h in hosts}
    return {p["metadata"]["name"] for p in pods
            if (p.get("status", {}).get("reason") == "NodeLost" or p["metadata"]["name"] in fenced)
            and pod_host(p) in keys}


def fence_loop(stop_event, on_peer_lost=None):
    """Fence stranded pods, checked every TF_CLUSTER_FENCE_SECONDS against the release's pods as a
    watch keeps them (no request per check). With `on_peer_lost` (the ParameterServer
    coordinator), call it once when a pod of the release is newly lost with its node:
    TensorFlow's coordinator waits on RPCs to a worker whose machine vanished (no reset, no error)
    until TCP gives up, ~15 minutes; restarting it reconnects it to the replacement."""
    every = float(env("TF_CLUSTER_FENCE_SECONDS", "0"))
    after = float(env("TF_CLUSTER_FENCE_AFTER", "10"))
    namespace, selector = env("TF_CLUSTER_NAMESPACE"), env("TF_CLUSTER_RELEASE_SELECTOR")
    pods = Informer("/api/v1/namespaces/%s/pods" % namespace, label_selector=selector,
                    name="the release's pods", keep=slim_pod, page=250).start()
    warned, known = False, None
    hosts = peer_hosts(env("TF_CONFIG")) if on_peer_lost is not None else []
    while not stop_event.wait(every):
        if pods.forbidden:
            log("cannot watch the release's pods to fence a lost node's (%s): the launcher's Role "
                "must allow list and watch on pods" % pods.forbidden)
            return
        if not pods.synced.is_set():
            continue
        current = pods.snapshot()
        if pods.clock_offset is None:
            continue  # no answer from the API server yet to read its clock from
        try:
            # the deletion deadline is the API server's time: compared on its clock, not this node's
            fenced = fence_stranded(namespace, current, after, now=time.time() + pods.clock_offset)
            warned = False
        except (ConfigError, urllib.error.URLError, OSError, ValueError, KeyError) as e:
            if not warned:  # an API outage: said once, retried quietly
                log("cannot fence pods stranded on lost nodes (will retry): %s" % e)
                warned = True
            continue
        if on_peer_lost is not None:
            lost = lost_peers(current, set(fenced), hosts)
            if known is not None and lost - known:
                pods.stop()
                on_peer_lost(sorted(lost - known))
                return
            known = lost


def echo_metrics(stop_event, interval=2.0, on_line=None):
    """Print each report of the hypertune metrics file not printed yet (the library rewrites the
    file with its last 100 reports, each with a timestamp) whenever the file changes, and once
    more after the child ends. `on_line` reads each printed line (the exporter's progress)."""
    path = env("CLOUD_ML_HP_METRIC_FILE", "/tmp/hypertune/output.metrics")
    seen, last = None, -1.0
    while True:
        stopping = stop_event.wait(interval)
        try:
            st = os.stat(path)
            key = (st.st_mtime, st.st_size)
        except OSError:
            key = None
        if key is not None and key != seen:
            seen = key
            try:
                with open(path) as f:
                    lines = [ln.strip() for ln in f.read().splitlines() if ln.strip()]
            except OSError:
                lines = []
            for line in lines:
                try:
                    stamp = float(json.loads(line).get("timestamp", 0))
                except (ValueError, AttributeError, TypeError):
                    continue
                if stamp > last:
                    last = stamp
                    # on a line of its own even when the program left a progress bar open
                    with OUTPUT:  # whole, between the child's chunks (metrics.enabled)
                        sys.stdout.write("\nTF_CLUSTER_METRICS %s\n" % line)
                        sys.stdout.flush()
                    if on_line is not None:
                        on_line("TF_CLUSTER_METRICS %s" % line)
            sys.stdout.flush()
        if stopping:
            return


# ------------------------------------------------------------ progress, as Prometheus metrics

# The child's output read with the rules of tooling/tf_cluster/progress.py, the one reader of the
# progress protocol (its docstring says what the lines mean); tests/progress-corpus holds both
# readers to the same readings (progress.TaskProgress.reading). Change both or neither.
PREFIX = "TF_CLUSTER_"
KINDS = ("PROGRESS", "RESULT", "EVENT", "METRICS")
BACKSPACE = "\x08"
ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
KERAS_EPOCH = re.compile(r"^Epoch (\d+)/(\d+)\s*$")
KERAS_METRIC = re.compile(r"\b([a-z_][a-z0-9_]*): (-?\d+(?:\.\d+)?(?:e[-+]?\d+)?|(?:nan|-?inf)\b)")
KERAS_BAR = re.compile(r"(?:(?<=\.\d{4})|(?<=\s)|^)(\d+)/(\d+) (?:\[|\u2501|-)")  # \u2501: Keras 3's bar
KERAS_STEP_TIME = re.compile(r"\b(\d+)(s|ms|us)/step\b")
PER_SECOND = {"s": 1.0, "ms": 1e3, "us": 1e6}
READING_COUNTS = ("epoch", "epochs", "step")
READING_RATES = ("loss", "steps_per_second", "examples_per_second")
LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"  # where str.splitlines() splits
LONGEST_LINE = 1 << 20  # a line longer is read as it is (a bound on memory, never reached by Keras)
STATES = ("waiting_for_peers", "training", "stopped_by_leader", "exited")
OUTPUT = threading.RLock()  # the launcher's stdout: the child's chunks and the METRICS lines, each whole


def parse_message(line):
    """(kind, data) of a protocol line, else None (progress.parse)."""
    line = line.strip()
    if not line.startswith(PREFIX):
        at = line.find(PREFIX + "METRICS {")  # the echo of 3., after a progress bar left open
        if at < 0:
            return None
        line = line[at:]
    head, _, payload = line.partition(" ")
    kind = head[len(PREFIX):]
    if kind not in KINDS:
        return None
    try:
        data = json.loads(payload)
    except ValueError:
        return None
    return (kind, data) if isinstance(data, dict) else None


def fold(line):
    """What a terminal shows of a line redrawn in place (progress.fold)."""
    line = ANSI.sub("", line.rstrip("\r").rsplit("\r", 1)[-1])
    if BACKSPACE in line:  # each backspace erases the character before it
        kept = []
        for ch in line:
            if ch != BACKSPACE:
                kept.append(ch)
            elif kept:
                kept.pop()
        line = "".join(kept)
    bars = [m.start() for m in KERAS_BAR.finditer(line)]
    return line[bars[-1]:] if len(bars) > 1 else line


def keras_metrics(line):
    """Metrics of a Keras progress line, else {} (progress.keras_metrics)."""
    line = ANSI.sub("", line)
    if " - " not in line or not KERAS_BAR.search(line):
        return {}
    return dict((k, float(v)) for k, v in KERAS_METRIC.findall(fold(line)) if k not in ("eta",))


def keras_pace(line, epoch):
    """step (over the run) and steps_per_second of a Keras progress line (progress.keras_pace)."""
    shown = fold(line)
    bars = list(KERAS_BAR.finditer(shown))
    if not bars:
        return {}
    done, per_epoch = int(bars[-1].group(1)), int(bars[-1].group(2))
    out = {"step": float((epoch - 1) * per_epoch + done)}
    took = KERAS_STEP_TIME.search(shown, bars[-1].start())
    if took and int(took.group(1)) > 0:
        out["steps_per_second"] = PER_SECOND[took.group(2)] / int(took.group(1))
    return out


def hypertune_numbers(data):
    """The numbers of one cloudml-hypertune report (progress.hypertune_metrics)."""
    out = {}
    for k, v in data.items():
        if k in ("timestamp", "trial"):
            continue
        try:
            number = float(v)
        except (TypeError, ValueError):
            continue
        if k != "global_step":
            out[k] = number
        elif number:  # the library writes "0" for a report that gave no step
            out["step"] = number
    return out


class Progress:
    """What the child reported so far (progress.TaskProgress, the fields its reading needs)."""

    def __init__(self):
        self.progress, self.result, self.files, self.pace = {}, {}, {}, {}
        self.speaks_protocol = False
        self.keras_epoch = None

    def feed(self, line):
        """Read one output line; True when it shows training going on: a protocol message, Keras
        beginning an epoch or redrawing its bar (whose values are read only as the epoch's last
        redraw, by the rule of fold, but which says the task is alive: tf_cluster_task_last_progress)."""
        msg = parse_message(line)
        if msg is None:
            if not self.speaks_protocol:
                self._feed_keras(line)
            plain = ANSI.sub("", line)
            return bool(KERAS_EPOCH.match(plain.strip()) or KERAS_BAR.search(plain))
        kind, data = msg
        if kind == "METRICS":
            self.files.update(hypertune_numbers(data))
            return True
        if not self.speaks_protocol:
            self.speaks_protocol, self.progress, self.pace = True, {}, {}
        if kind == "PROGRESS":
            self.progress = data
        elif kind == "RESULT":
            self.result = data
        return True

    def _feed_keras(self, line):
        epoch = KERAS_EPOCH.match(line.strip())
        if epoch:
            self.keras_epoch = (int(epoch.group(1)), int(epoch.group(2)))
            return
        metrics = keras_metrics(line)
        if metrics and self.keras_epoch:
            self.progress = {"epoch": self.keras_epoch[0], "epochs": self.keras_epoch[1]}
            self.progress.update(metrics)
            self.pace = keras_pace(line, self.keras_epoch[0])

    def reading(self):
        """epoch, epochs, step, loss, steps_per_second, examples_per_second, metrics: each once
        known (progress.TaskProgress.reading)."""
        numbers = {}
        for source in (self.pace, self.files, self.progress, self.result):
            for k, v in source.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    numbers["step" if k == "global_step" else k] = float(v)
        out = {}
        for k in READING_COUNTS:
            v = numbers.pop(k, None)
            if v is not None and math.isfinite(v):
                out[k] = int(v)
        for k in READING_RATES:
            if k in numbers:
                out[k] = numbers.pop(k)
        if numbers:
            out["metrics"] = dict(sorted(numbers.items()))
        return out


class Lines:
    """The complete lines of a byte stream read in chunks, split where str.splitlines() splits the
    whole text (as the tooling splits a log), each given to `on_line`."""

    def __init__(self, on_line):
        self.on_line = on_line
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.tail = ""

    def feed(self, data, final=False):
        parts = (self.tail + self.decoder.decode(data, final)).splitlines(True)
        self.tail = ""
        # an unfinished line waits for the rest; so does one ending in \r (\r\n may be split)
        if parts and not final and (parts[-1][-1] not in LINE_BREAKS or parts[-1][-1] == "\r"):
            self.tail = parts.pop()
            if len(self.tail) > LONGEST_LINE:
                parts.append(self.tail)
                self.tail = ""
        for part in parts:
            if part.endswith("\r\n"):
                part = part[:-2]
            elif part[-1] in LINE_BREAKS:
                part = part[:-1]
            self.on_line(part)


def prometheus_number(v):
    if isinstance(v, int):
        return str(v)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


def prometheus_labels(pairs):
    escaped = [(k, str(v).replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n")) for k, v in pairs]
    return ",".join('%s="%s"' % kv for kv in escaped)


class Metrics:
    """The task's state and progress, and their Prometheus text (version 0.0.4)."""

    def __init__(self, port, labels, failures=0, started=STARTED):
        self.port, self.labels, self.failures, self.started = port, labels, failures, started
        self.lock = threading.Lock()
        self.progress = Progress()
        self.state = "waiting_for_peers"
        self.waited = [None, None]  # the peer wait's start and end (monotonic)
        self.last_progress = None  # wall clock of the last progress line

    @classmethod
    def from_env(cls):
        """The exporter TF_CLUSTER_METRICS_PORT asks for, else None."""
        port = env("TF_CLUSTER_METRICS_PORT")
        if not port:
            return None
        if not port.isdigit() or not 0 < int(port) < 65536:
            log("TF_CLUSTER_METRICS_PORT=%r is not a port; no metrics" % port)
            return None
        failures = env("TF_CLUSTER_INDEX_FAILURES")
        labels = [("release", env("TF_CLUSTER_RELEASE")), ("role", env("TF_CLUSTER_ROLE", "task")),
                  ("index", env("JOB_COMPLETION_INDEX") or env("TF_TASK_INDEX", "0")),
                  ("run", env("TF_CLUSTER_RUN"))]
        return cls(int(port), labels, int(failures) if failures.isdigit() else 0)

    def set_state(self, state, unless=()):
        with self.lock:
            if self.state not in unless:
                self.state = state

    def waiting(self, started):
        with self.lock:
            self.state, self.waited[0] = "waiting_for_peers", started

    def waited_until(self, ended):
        with self.lock:
            self.waited[1] = ended

    def read_line(self, line):
        with self.lock:
            if self.progress.feed(line):
                self.last_progress = time.time()

    def text(self):
        with self.lock:
            reading = self.progress.reading()
            state, last = self.state, self.last_progress
            start, end = self.waited
        wait = ((end if end is not None else time.monotonic()) - start) if start is not None else 0.0
        families = [
            ("state", "1 for the task's current state, 0 for the others.",
             [((("state", s),), int(s == state)) for s in STATES]),
            ("epoch", "Epoch the task last reported (Keras counts from 1).", reading.get("epoch")),
            ("epochs", "Epochs the task trains for, as it reported.", reading.get("epochs")),
            ("step", "Training step the task last reported, counted over the run.", reading.get("step")),
            ("loss", "Loss the task last reported (NaN and Inf as reported).", reading.get("loss")),
            ("metric", "Every other metric the task last reported, by name.",
             [((("name", k),), v) for k, v in sorted(reading.get("metrics", {}).items())]),
            ("steps_per_second", "Training steps per second the task last reported.",
             reading.get("steps_per_second")),
            ("examples_per_second", "Examples per second the task last reported.",
             reading.get("examples_per_second")),
            ("peer_wait_seconds", "Seconds the task waited for its peers to resolve (growing while it waits).",
             wait),
            ("last_progress_timestamp_seconds", "Unix time of the task's last progress line.", last),
            ("start_timestamp_seconds", "Unix time the task's launcher started.", self.started),
            ("index_failures", "Failures of this task's index before this pod (the Job's per-index count).",
             self.failures),
        ]
        out = []
        for name, doc, samples in families:
            if samples is None or samples == []:
                continue
            if not isinstance(samples, list):
                samples = [((), samples)]
            name = "tf_cluster_task_" + name
            out.append("# HELP %s %s" % (name, doc))
            out.append("# TYPE %s gauge" % name)
            for extra, value in samples:
                out.append("%s{%s} %s" % (name, prometheus_labels(list(self.labels) + list(extra)),
                                          prometheus_number(value)))
        return "\n".join(out) + "\n"

    def serve(self):
        """GET /metrics on the port, every address (IPv6 and IPv4 where it can), in a daemon thread."""
        import http.server
        import socketserver

        metrics = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                if self.path.split("?", 1)[0] != "/metrics":
                    body, status, kind = b"not found: the metrics are at /metrics\n", 404, "text/plain"
                else:
                    body, status = metrics.text().encode("utf-8"), 200
                    kind = "text/plain; version=0.0.4; charset=utf-8"
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass  # a scrape every few seconds is not news

        def bind(family, host):
            class Server(http.server.ThreadingHTTPServer):
                daemon_threads = True
                address_family = family

                def server_bind(self):
                    if family == socket.AF_INET6:  # and IPv4, as TensorFlow's server does
                        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
                    socketserver.TCPServer.server_bind(self)
                    self.server_name, self.server_port = "localhost", self.server_address[1]  # no DNS lookup

            return Server((host, self.port), Handler)

        try:
            try:
                server = bind(socket.AF_INET6, "::")
            except OSError:  # no IPv6 here
                server = bind(socket.AF_INET, "0.0.0.0")
        except OSError as e:
            log("cannot serve metrics on port %d (%s); training goes on without them" % (self.port, e))
            return None
        threading.Thread(target=server.serve_forever, daemon=True).start()
        log("serving metrics on :%d/metrics" % self.port)
        return server


def write_all(fd, data):
    """Write all of `data` to `fd`; False once it cannot (a closed stdout: the rest is dropped)."""
    while data:
        try:
            n = os.write(fd, data)
        except OSError:
            return False
        data = data[n:]
    return True


def pump(source, fd, lines):
    """Copy the child's output (`source`, a pipe) to ours (`fd`) as it comes, and read its lines."""
    copying = True
    while True:
        try:
            data = os.read(source, 65536)
        except OSError:
            data = b""
        if not data:
            break
        if copying:
            with OUTPUT:
                copying = write_all(fd, data)
        lines.feed(data)
    lines.feed(b"", final=True)


def start_child(argv, metrics):
    """The child process and, with `metrics`, the threads that pump its piped stdout and stderr."""
    if metrics is None:
        return subprocess.Popen(argv), []
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    pumps = []
    for pipe, fd in ((proc.stdout, 1), (proc.stderr, 2)):
        pumps.append(threading.Thread(target=pump, args=(pipe.fileno(), fd, Lines(metrics.read_line)), daemon=True))
        pumps[-1].start()
    metrics.set_state("training")
    return proc, pumps


def stop_child(proc, grace):
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        log("child still running %ss after SIGTERM; killing it" % grace)
        proc.kill()
        proc.wait()


def run(argv):
    if not argv:
        log("no command given: usage: launcher.py -- <command> [args...]")
        return EXIT_CONFIG
    outcome = {}  # "signal": the first one received; "leader": how the leading Job ended; "killed"
    task = {"proc": None, "starting": False}
    grace = float(env("TF_CLUSTER_STOP_GRACE", "20"))

    def kill_if_running(signum):
        proc = task["proc"]
        if proc.poll() is None:
            log("child still running %ss after signal %d (TensorFlow catches SIGTERM in multi-worker "
                "runs); killing it" % (grace, signum))
            outcome["killed"] = True
            proc.kill()

    def forward(signum):
        proc = task["proc"]
        log("got signal %d; forwarding to the child (it has %ss to exit)" % (signum, grace))
        if proc.poll() is None:
            proc.send_signal(signum)
            if "timer" not in outcome:  # TF's coordination service catches SIGTERM and trains on: bound it
                outcome["timer"] = threading.Timer(grace, kill_if_running, args=(signum,))
                outcome["timer"].daemon = True
                outcome["timer"].start()

    def on_signal(signum, _frame):
        """Installed first: the launcher is the container's PID 1, and the kernel ignores a signal
        PID 1 left at its default action, so without this a pod deleted while it waits for its peers
        would wait for the kubelet's SIGKILL."""
        outcome.setdefault("signal", signum)
        if task["proc"] is not None:
            forward(signum)
        elif not task["starting"]:
            raise Stopped(signum)
        # else: the child is being started; run_task forwards the signal once it exists

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    metrics = None
    try:
        metrics = Metrics.from_env()  # None: metrics.enabled=false, the child writes to our stdout itself
        return run_task(argv, outcome, task, grace, forward, metrics)
    except Stopped as e:
        log("got signal %d before the command started; exiting %d without starting it" % (e.signum, 128 + e.signum))
        if metrics is not None:
            metrics.set_state("exited")
        return 128 + e.signum


def leader_exit(cond, already):
    """The exit code and log line of a task whose leading Job ended as `cond` (the watch's word), the
    child stopped (or, `already`, never started)."""
    what = leader_name()
    if cond == UNWATCHABLE:
        log("task stopped (exit %d): a task that cannot watch %s would never end" % (EXIT_CONFIG, what))
        return EXIT_CONFIG
    if cond == GONE:
        log("%s no longer exists; task stopped (exit %d: this run cannot complete; install or upgrade the "
            "release for a new one)" % (what, EXIT_LEADER_FAILED))
        EVENTS.record("LeaderGone", "%s no longer exists: task stopped (exit %d)" % (what, EXIT_LEADER_FAILED),
                      warning=True)
        return EXIT_LEADER_FAILED
    if not already and cond in ("Complete", "Failed"):
        EVENTS.record("StoppedWithLeader", "%s is %s: task stopped (exit %d)" % (
            what, cond, 0 if cond == "Complete" else EXIT_LEADER_FAILED), warning=cond == "Failed")
    if already:
        log("%s is already %s; nothing to do" % (what, cond))
        return EXIT_LEADER_FAILED if cond == "Failed" else 0
    if cond == "Complete":
        if env("TF_CLUSTER_HEARTBEAT"):
            log("%s is done; task stopped (exit 0)" % what)
        else:
            log("leading Job completed; task stopped (exit 0)")
        return 0
    if cond == ABANDONED:
        log("%s is gone; task stopped (exit 0): reinstall or upgrade the release (a new run) to serve "
            "a new session" % what)
        return 0
    log("leading Job failed; task stopped (exit %d)" % EXIT_LEADER_FAILED)
    return EXIT_LEADER_FAILED


def run_task(argv, outcome, task, grace, forward, metrics):
    role, index = env("TF_CLUSTER_ROLE", "task"), int(env("TF_TASK_INDEX", "0") or 0)
    try:
        hosts = peers_needed(env("TF_CONFIG"), env("TF_CLUSTER_STRATEGY"), role)
        fencer = fences(env("TF_CONFIG"), role, index)
    except ConfigError as e:
        log(str(e))
        return EXIT_CONFIG
    stops_with_leader = env("TF_CLUSTER_STOP_WITH_LEADER") == "true"
    fencing = threading.Event()  # never set: the fence runs as long as the task
    coordinator = env("TF_CLUSTER_STRATEGY") == "parameterServer" and role == "chief"
    peer_lost = {}
    fencer = fencer and float(env("TF_CLUSTER_FENCE_SECONDS", "0") or 0) > 0
    if fencer and not coordinator:
        threading.Thread(target=fence_loop, daemon=True, args=(fencing,)).start()
    if metrics is not None:
        metrics.serve()
    stop_event = threading.Event()  # the child has exited: the helper threads end

    def finished_exit():
        if metrics is not None:
            metrics.set_state("exited")
        stop_event.set()
        return leader_exit(outcome["leader"], already=True)

    if stops_with_leader:
        cond = leader_condition_at_start()  # a replacement started after the run ended exits at once
        if cond:
            outcome["leader"] = cond
            return finished_exit()

        def on_finished(cond):
            outcome["leader"] = cond
            if metrics is not None:
                metrics.set_state("stopped_by_leader")
            if task["proc"] is not None:
                stop_child(task["proc"], grace)
        # watched from the start: the leader may end (or be deleted) while this task waits for peers
        threading.Thread(target=watch_leader, daemon=True,
                         args=(float(env("TF_CLUSTER_POLL_SECONDS", "5")), on_finished,
                               stop_event)).start()

    if hosts and env("TF_CLUSTER_WAIT_FOR_PEERS", "true") == "true":
        timeout = float(env("TF_CLUSTER_PEER_TIMEOUT", "600"))
        if metrics is not None:
            metrics.waiting(time.monotonic())

        def give_up():
            return "leader" in outcome
        missing = wait_for_peer_pods(hosts, timeout, give_up=give_up)
        if missing is None:
            missing = wait_for_peers(hosts, timeout, give_up=give_up)
        if metrics is not None:
            metrics.waited_until(time.monotonic())
        if "leader" in outcome:
            return finished_exit()
        if missing:
            log("gave up after %ds: %d peer(s) never resolved: %s. Check that their pods "
                "exist (kubectl get pods) and that the headless Service publishes not-ready "
                "addresses." % (timeout, len(missing), ", ".join(missing)))
            if metrics is not None:
                metrics.set_state("exited")
            stop_event.set()
            return EXIT_PEERS_TIMEOUT
    if "leader" in outcome:
        return finished_exit()

    if not env("TF_CONFIG"):
        log("TF_CONFIG is not set: this release has one training task, which trains without a "
            "cluster (no gRPC server, no peers), as TFJob does. A program that reads "
            "TF_CONFIG['task'] needs it: set tfConfig.alwaysSet=true.")
    intra = env("TF_NUM_INTRAOP_THREADS")
    if intra.isdigit() and not env("TF_NUM_INTEROP_THREADS"):
        # One inter-op thread deadlocks ParameterServerStrategy's fit (measured, TF 2.21).
        os.environ["TF_NUM_INTEROP_THREADS"] = str(max(2, int(intra)))
    log("starting: %s" % " ".join(argv))
    task["starting"] = True  # a signal from here on waits for the child, then is forwarded to it
    try:
        proc, pumps = start_child(argv, metrics)
    except OSError as e:
        log("cannot start %s: %s" % (argv[0], e))
        if metrics is not None:
            metrics.set_state("exited")
        stop_event.set()
        return 127
    task["proc"] = proc
    if "signal" in outcome:  # arrived while the child was being started
        forward(outcome["signal"])
    if "leader" in outcome:  # the leader ended while the child was being started
        stop_child(proc, grace)

    echo = threading.Thread(target=echo_metrics, daemon=True, args=(stop_event,),
                            kwargs={"on_line": metrics.read_line if metrics is not None else None})
    echo.start()
    if fencer and coordinator:
        def on_peer_lost(names):
            log("%s lost with its node; restarting the coordinator (exit %d) so it reconnects to the "
                "replacement from its last checkpoint: TensorFlow's coordinator would wait on the lost "
                "worker's RPCs until TCP gives up (~15 min)" % (", ".join(names), EXIT_PEER_LOST))
            peer_lost["names"] = names
            stop_child(proc, grace)
        threading.Thread(target=fence_loop, daemon=True, args=(fencing, on_peer_lost)).start()

    rc = proc.wait()
    stop_event.set()
    echo.join(5)
    deadline = time.monotonic() + 5  # the child's last output; a process it left behind may hold the pipes
    for t in pumps:
        t.join(max(0.0, deadline - time.monotonic()))
    if metrics is not None:
        metrics.set_state("exited", unless=("stopped_by_leader",))
    if outcome.get("leader"):
        return leader_exit(outcome["leader"], already=False)
    if "signal" in outcome:
        # Stopped by the pod's termination. When the leading Job has just completed, that is the
        # Job controller ending this (finished) Job's other tasks: not a failure.
        cond = leader_condition_or_empty() if (stops_with_leader or env("TF_CLUSTER_LEADER_JOB")) else ""
        if cond in SUCCESS:
            log("%s is %s; task stopped (exit 0)" % (leader_name(), cond))
            return 0
    if peer_lost:
        log("coordinator stopped after a lost peer (exit %d): its Job starts it again" % EXIT_PEER_LOST)
        EVENTS.record("RestartingCoordinator", "a peer was lost with its node: the coordinator stops (exit %d) "
                      "and its Job starts it again, reconnecting to the replacement" % EXIT_PEER_LOST,
                      warning=True)
        return EXIT_PEER_LOST
    if "signal" in outcome and (outcome.get("killed") or rc == 0):
        # killed after the grace, or it saved and exited 0 (as TensorFlow's preemption handling and
        # many programs do): it did not finish, and its Job must run it again, not count it done
        signum = outcome["signal"]
        log("task stopped by signal %d before the run was over (the command %s; exit %d, so that its Job "
            "runs it again)" % (signum, "was killed" if outcome.get("killed") else "exited 0", 128 + signum))
        return 128 + signum
    if rc < 0:
        rc = 128 - rc
    log("command exited with %d" % rc)
    return rc


def check():
    """`helm test`: the leading Job must not have failed; while it runs, peers must resolve."""
    job = env("TF_CLUSTER_LEADER_JOB")
    what = leader_name()
    try:
        cond = leader_condition()
    except (ConfigError, urllib.error.URLError, OSError, ValueError) as e:
        print("FAIL: cannot read %s: %s" % (what, e))
        return 1
    if cond == "Failed":
        print("FAIL: Job %s failed; see kubectl describe job %s" % (job, job))
        return 1
    if cond == ABANDONED:
        print("FAIL: %s stopped renewing its heartbeat; its servers stop (see the notebook's kernel)" % what)
        return 1
    if cond == "Complete":
        print("OK: %s completed" % what)
        return 0
    missing = wait_for_peers(peer_hosts(env("TF_CONFIG")), float(env("TF_CLUSTER_PEER_TIMEOUT", "60")))
    if missing:
        print("FAIL: %s is running but these tasks do not resolve: %s" % (what, ", ".join(missing)))
        return 1
    print("OK: %s is running and every task resolves" % what)
    return 0


def main(args):
    if args[:1] == ["--check"]:
        return check()
    if args[:1] == ["--"]:
        args = args[1:]
    return run(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
