"""The peer wait through the API: the peers' pods (one peer) or their headless Service's
EndpointSlices (more), watched until each is published, then each name looked up once."""

from __future__ import annotations

import http.client
import time
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Any, Callable

from .common import ConfigError, env, log
from .dns import name_exists
from .events import EVENTS
from .informer import Informer
from .kubeapi import api
from .tfconfig import resolves, wait_for_peers

if TYPE_CHECKING:
    # peer_watch's answer: the Informer, what it holds ("pods", "endpoints"), the hosts its objects
    # publish, why a host is missing (host, the objects -> words)
    PeerWatch = tuple[
        Informer,
        str,
        Callable[[list[dict[str, Any]]], set[str]],
        Callable[[str, list[dict[str, Any]]], str],
    ]


def pod_host(pod: dict[str, Any]) -> str | None:
    """The DNS host a pod publishes through the release's headless Service: <hostname>.<subdomain>."""
    spec = pod.get("spec", {})
    return "%s.%s" % (spec.get("hostname"), spec.get("subdomain")) if spec.get("hostname") else None


def backs(pod: dict[str, Any], host: str) -> bool:
    """Is `pod` the one behind `host` (<hostname>.<subdomain>, maybe followed by the namespace...)?"""
    ph = pod_host(pod)
    # bool(ph) rules None out first (mypy does not narrow through bool())
    return bool(ph) and (host == ph or host.startswith(ph + "."))  # type: ignore[operator]


def why_missing(host: str, pods: list[dict[str, Any]]) -> str:
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


def slim_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """What the launcher reads of a pod (the peer wait, the fence): a pod's spec carries TF_CONFIG,
    ~120 KB at 4096 tasks, which a watch of the release's pods must not keep for each."""
    meta, spec, status = pod.get("metadata", {}), pod.get("spec", {}), pod.get("status", {})
    return {
        "metadata": {k: meta[k] for k in ("name", "deletionTimestamp", "resourceVersion") if k in meta},
        "spec": {k: spec[k] for k in ("hostname", "subdomain", "nodeName") if k in spec},
        "status": {k: status[k] for k in ("phase", "reason", "podIP", "conditions") if k in status},
    }


def host_key(host: str) -> str:
    """<hostname>.<service> of a TF_CONFIG host (which may go on with the namespace and domain)."""
    return ".".join(host.split(".")[:2])


def pod_keys(pods: list[dict[str, Any]]) -> set[str]:
    """The hosts (<hostname>.<service>) backed by a live pod with an IP: the EndpointSlice
    controller has put each in the headless Service (it publishes not-ready addresses), and
    CoreDNS answers for it."""
    # the condition keeps only the pods whose pod_host(p) is a host (mypy cannot tell the calls agree)
    return {
        pod_host(p)  # type: ignore[misc]
        for p in pods
        if pod_host(p) and p.get("status", {}).get("podIP") and not p.get("metadata", {}).get("deletionTimestamp")
    }


def published(host: str, pods: list[dict[str, Any]]) -> bool:
    """Is `host` backed by a live pod with an IP (pod_keys)?"""
    return host_key(host) in pod_keys(pods)


def index_selector(host: str) -> str | None:
    """A label selector for the pod behind one host: an Indexed Job's pod hostname is <job>-<index>."""
    job, _, index = host.split(".")[0].rpartition("-")
    if job and index.isdigit():
        return "batch.kubernetes.io/job-name=%s,batch.kubernetes.io/job-completion-index=%s" % (job, index)
    return None


def peer_selector(hosts: list[str]) -> str | None:
    """A label selector for the pods behind `hosts`: the one Job index's pods for one host, the
    release's pods for more."""
    if len(hosts) == 1 and index_selector(hosts[0]):
        return index_selector(hosts[0])
    return env("TF_CLUSTER_RELEASE_SELECTOR")


def endpoint_keys(slices: list[dict[str, Any]]) -> set[str]:
    """The hosts (<hostname>.<service>) among a headless Service's EndpointSlices that CoreDNS
    serves: with an address, and ready (with publishNotReadyAddresses, every address is)."""
    return {
        "%s.%s" % (e["hostname"], s.get("metadata", {}).get("labels", {}).get("kubernetes.io/service-name"))
        for s in slices
        for e in s.get("endpoints") or []
        if e.get("hostname") and e.get("addresses") and (e.get("conditions") or {}).get("ready") is not False
    }


def peer_service(hosts: list[str]) -> str | None:
    """The headless Service every one of `hosts` (<hostname>.<service>...) belongs to, if one."""
    services = {h.split(".")[1] if h.count(".") else "" for h in hosts}
    return services.pop() if len(services) == 1 and "" not in services else None


def why_unpublished(namespace: str, host: str) -> str:
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


def peer_watch(namespace: str, hosts: list[str]) -> PeerWatch | None:
    """What to watch for `hosts`: (an Informer, what it holds, its keys function, why a host is
    missing), or None when there is nothing to watch. One peer: its pod, by its Job index; more:
    their headless Service's EndpointSlices."""
    service = peer_service(hosts) if len(hosts) > 1 else None
    selector = peer_selector(hosts)
    if service:
        informer = Informer(
            "/apis/discovery.k8s.io/v1/namespaces/%s/endpointslices" % namespace,
            label_selector="kubernetes.io/service-name=" + service,
            name="peer endpoints",
        )

        def why(h: str, _current: list[dict[str, Any]]) -> str:
            return why_unpublished(namespace, h)

        return informer, "endpoints", endpoint_keys, why
    if selector:
        informer = Informer(
            "/api/v1/namespaces/%s/pods" % namespace, label_selector=selector, name="peer pods", keep=slim_pod
        )
        return informer, "pods", pod_keys, why_missing
    return None


def say_waiting(
    hosts: list[str],
    missing: list[str],
    elapsed: float,
    timeout: float,
    what: str,
    why: Callable[[str, list[dict[str, Any]]], str],
    current: list[dict[str, Any]],
) -> None:
    """The log line and Event of a peer wait still going on."""
    shown = 10 if what == "pods" else 3  # endpoints: each reason is a request
    waiting = "waiting for %d/%d peer pod(s) (%ds/%ds): %s" % (
        len(missing),
        len(hosts),
        elapsed,
        timeout,
        "; ".join("%s (%s)" % (h, why(h, current)) for h in missing[:shown]) + (" ..." if len(missing) > shown else ""),
    )
    log(waiting)
    EVENTS.record("WaitingForPeers", waiting)


def await_published(
    watch: PeerWatch,
    hosts: list[str],
    timeout: float,
    interval: float,
    give_up: Callable[[], bool] | None,
    start: float,
    seen: dict[str, float],
) -> list[str] | None:
    """Follow the watch until every host is published (fills `seen`: host -> when first seen, 0 in
    the first LIST). Returns [] when all are, the hosts still missing at the timeout or give_up(), or
    None when the API cannot be read."""
    pods, what, keys, why = watch
    last_log = start
    first = True
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
            return []
        if now - start >= timeout:
            return missing
        if now - last_log >= interval:
            if give_up is not None and give_up():
                return missing
            say_waiting(hosts, missing, now - start, timeout, what, why, current)
            last_log = now
        pods.wait_for_change(min(interval, max(0.05, start + timeout - now)))


def settle_dns(hosts: list[str], seen: dict[str, float], settle: float) -> list[str]:
    """CoreDNS learns a name from the EndpointSlice the controller writes when it sees the pod's IP,
    as we do, a moment later: ask for the name as a record type TensorFlow never asks for (a new one
    each time: PROBE_TYPES) until CoreDNS knows it, then look it up once. Returns the hosts that do
    not resolve."""
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
    return [h for h in hosts if not resolves(h)]


def wait_for_peer_pods(
    hosts: list[str],
    timeout: float,
    interval: float = 5.0,
    give_up: Callable[[], bool] | None = None,
    settle: float = 1.0,
) -> list[str] | None:
    """Wait until `hosts` are published, learnt through the API (one LIST, then one WATCH), then
    check each name in DNS once. One peer: its pod, watched by its Job index. More: their headless
    Service's EndpointSlices, which CoreDNS itself serves from (a hundred addresses a slice, where
    a pod carries TF_CONFIG: ~120 KB each at 4096 tasks). No name is looked up before it is
    published, so no lookup leaves an NXDOMAIN in CoreDNS' cache (30 s with the addon's Corefile)
    to stall the start. Returns the hosts still missing (as wait_for_peers), or None when the API
    cannot be read (no Kubernetes, RBAC without watch on pods or EndpointSlices): the caller waits
    on DNS instead."""
    namespace = env("TF_CLUSTER_NAMESPACE")
    watch = peer_watch(namespace, hosts) if env("KUBERNETES_SERVICE_HOST") and namespace else None
    if watch is None:
        return None
    pods, what = watch[0], watch[1]
    pods.start()
    start = time.monotonic()
    seen: dict[str, float] = {}  # host -> when its pod was first seen with an IP (monotonic; 0: in the first LIST)
    try:
        missing = await_published(watch, hosts, timeout, interval, give_up, start, seen)
    finally:
        pods.stop()
    if missing != []:
        return missing
    late = settle_dns(hosts, seen, settle)
    if not late:
        log(
            "all %d peer(s) resolve after %.1fs (their %s watched first: %d API request(s), %d lookup(s))"
            % (len(hosts), time.monotonic() - start, what, pods.requests, len(hosts))
        )
        return []
    log(
        "%d peer pod(s) have an IP but DNS does not answer for them yet: %s; waiting on DNS (a headless "
        "Service that does not publish not-ready addresses, or a slow EndpointSlice controller)"
        % (len(late), ", ".join(late[:10]))
    )
    return wait_for_peers(late, max(1.0, timeout - (time.monotonic() - start)), interval, give_up)
