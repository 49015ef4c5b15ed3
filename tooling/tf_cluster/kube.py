"""Talking to a real cluster: the client, namespaces, logs, events, a release's Jobs and pods
(`snapshot`), waiting for them to finish, diagnostics and `tf-cluster status`'s reading.

Shared by `tf-cluster smoke`, `status`, `logs`, `tune` and the cluster e2e tests. What the
objects mean (Job conditions by type, task states, reasons, exit codes, why pods wait) is
read in `cluster_state`; this module fetches them and hands them there.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from . import cluster_state, gang, progress
from .errors import RunError, TfClusterError, UsageError, yaml_problem
from .runner import RunReport

#: log lines read per task for its progress by `tf-cluster status` (the latest epoch is near the end)
LOG_TAIL = 5000


def client_for(kubeconfig: str | None):
    from kubernetes import client, config

    if kubeconfig:
        return config.new_client_from_config(str(kubeconfig))
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.ApiClient()


def connect(kubeconfig: str | None, namespace: str | None) -> tuple[object, str]:
    """A client for `kubeconfig` (else $KUBECONFIG or ~/.kube/config, else in-cluster) and the
    namespace to use: `namespace`, else the current context's, else `default` (as kubectl and Helm)."""
    import yaml
    from kubernetes import config

    try:
        api = client_for(kubeconfig)
    except (config.ConfigException, OSError, yaml.YAMLError) as e:
        where = kubeconfig or "$KUBECONFIG, ~/.kube/config or the pod's service account"
        if isinstance(e, yaml.YAMLError):
            at, problem = yaml_problem(e)
            why = f"not valid YAML{f' ({at})' if at else ''}: {problem}"
        else:
            why = " ".join(str(e).split())
        raise UsageError(f"no cluster to talk to: {where}: {why} (--kubeconfig K)") from e
    if namespace:
        return api, namespace
    try:
        _, current = config.list_kube_config_contexts(config_file=kubeconfig)
        return api, (current or {}).get("context", {}).get("namespace") or "default"
    except (config.ConfigException, OSError, yaml.YAMLError):
        return api, "default"


def kubelet_time(stamp: str) -> float:
    """A pod log line's timestamp (`kubectl logs --timestamps`: RFC 3339 with nanoseconds) as epoch seconds."""
    from datetime import datetime

    head, _, frac = stamp.rstrip("Z").partition(".")
    return datetime.fromisoformat(head + "+00:00").timestamp() + float("0." + (frac or "0"))


def pod_log(api, namespace: str, pod, tail_lines: int | None = None) -> str:
    """A pod's log, or "" when there is none yet (container not started, pod gone)."""
    from kubernetes import client

    try:
        return client.CoreV1Api(api).read_namespaced_pod_log(pod.metadata.name, namespace, tail_lines=tail_lines)
    except Exception:  # noqa: BLE001 - logs are best effort: progress and diagnostics must not end a wait
        return ""


def logs_of(api, namespace: str, selector: str, tail_lines: int = 30) -> str:
    """The last log lines of every pod matching a label selector, each under its name."""
    from kubernetes import client

    out = ""
    for pod in client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=selector).items:
        out += f"--- {pod.metadata.name}:\n" + (pod_log(api, namespace, pod, tail_lines) or "(no log)\n")
    return out


def ensure_namespace(api, namespace: str) -> bool:
    """Create the namespace unless it exists; True when it was created here."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    try:
        core.read_namespace(namespace)
        return False
    except client.ApiException as e:
        if e.status != 404:
            raise RunError(f"cannot read namespace {namespace}: {e.reason}") from e
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    return True


def namespace_phase(api, namespace: str) -> str:
    """Active, Terminating, or "" when there is none."""
    from kubernetes import client

    try:
        return client.CoreV1Api(api).read_namespace(namespace).status.phase or ""
    except client.ApiException as e:
        if e.status == 404:
            return ""
        raise RunError(f"cannot read namespace {namespace}: {e.reason}") from e


def delete_namespace(api, namespace: str) -> None:
    from kubernetes import client

    client.CoreV1Api(api).delete_namespace(namespace)


def serves_gang_api(api) -> bool:
    """Whether the cluster serves Kubernetes' gang API (scheduling.k8s.io/v1beta1 PodGroup, 1.37+)."""
    from kubernetes import client

    for group in client.ApisApi(api).get_api_versions().groups:
        if group.name == "scheduling.k8s.io" and any(v.version == "v1beta1" for v in group.versions):
            return "podgroups" in {r.name for r in client.SchedulingV1beta1Api(api).get_api_resources().resources}
    return False


def snapshot(api, namespace: str, release: str) -> cluster_state.Snapshot:
    from kubernetes import client

    sel = f"{cluster_state.INSTANCE}={release}"
    jobs = {j.metadata.name: j for j in client.BatchV1Api(api).list_namespaced_job(namespace, label_selector=sel).items}
    pods = [
        p
        for p in client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=sel).items
        if (p.metadata.labels or {}).get(cluster_state.JOB_NAME_LABEL) in jobs
    ]
    return cluster_state.Snapshot(jobs, pods)


def leader_log_line(api, namespace: str, snap: cluster_state.Snapshot) -> str:
    """The leading task's (index 0 of the first role that may lead) latest progress in words,
    else its last log line."""
    leader = snap.leader()
    if leader is None:
        return ""
    role, pod = leader
    text = pod_log(api, namespace, pod, tail_lines=40)
    reported = progress.TaskProgress.of_log(text)
    if reported.progress:
        return f"{role}-0: {reported.summary()}"
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return ""
    msg = progress.parse(lines[-1])
    return f"{role}-0: {msg.describe() if msg else lines[-1].strip()[-160:]}"


def wait_for_jobs(
    api,
    namespace: str,
    release: str,
    *,
    timeout: float,
    stuck_grace: float = 60,
    say: Callable[[str], None] = print,
    every: float = 2,
    progress_every: float = 15,
    cancel: Callable[[], str] | None = None,
    until: Callable[[cluster_state.Snapshot], str] | None = None,
) -> cluster_state.Snapshot:
    """Wait until every Job of the release is Complete or Failed; report progress as it goes.

    Returns the final snapshot (callers decide what Failed means), or the current one as soon as
    `cancel()` gives a reason, or `until(snapshot)` does (e.g. every task started). Raises RunError
    on timeout or when a pod is stuck (bad image, unschedulable, bad config) for `stuck_grace` seconds.
    """
    t0 = time.monotonic()
    last_line, last_progress = "", 0.0
    stuck_since: float | None = None
    gang_lines: list[str] = []
    never, last_gang = False, 0.0
    while True:
        snap = snapshot(api, namespace, release)
        line = snap.role_line() or "no Jobs yet"
        now = time.monotonic()
        if line != last_line:
            say(f"{now - t0:6.1f}s  {line}")
            last_line, last_progress = line, now
        elif now - last_progress >= progress_every:
            log = leader_log_line(api, namespace, snap)
            say(f"{now - t0:6.1f}s  {line}" + (f"  | {log}" if log else ""))
            last_progress = now
        if snap.finished():
            return snap
        reason = (until(snap) if until else "") or (cancel() if cancel else "")
        if reason:
            say(f"{now - t0:6.1f}s  stopped waiting: {reason}")
            return snap
        waiting = {p.metadata.name for g in gang.gangs(snap).values() for p in g.unbound}
        if waiting and now - last_gang >= (progress_every if gang_lines else 0):
            # A gang waiting for room is not stuck: it starts whole when room appears (unless it can never fit).
            gang_lines, never = gang.explain(api, namespace, snap)
            last_gang = now
            for ln in gang_lines:
                say(f"{now - t0:6.1f}s  {ln}")
        if waiting and never:
            stuck = gang_lines + snap.stuck()
        else:
            stuck = snap.stuck(skip=waiting)
        stuck_since = (stuck_since or now) if stuck else None
        if stuck_since is not None and now - stuck_since >= stuck_grace:
            raise RunError(
                "pods cannot start:\n  "
                + "\n  ".join(stuck)
                + "\n  (a bad image name, an image the nodes cannot pull or load, or requests no node fits)"
            )
        if now - t0 > timeout:
            raise RunError(f"the run did not finish within {timeout:.0f}s: {line}")
        time.sleep(every)


def wait_for_no_pods(
    api, namespace: str, release: str, *, timeout: float, say: Callable[[str], None] = print, every: float = 2
) -> list[str]:
    """Wait until no pod of the release is left (an uninstalled release's pods stop after their Jobs
    are deleted); returns the names still there at `timeout` ([] when they are all gone)."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    t0 = last = time.monotonic()
    while True:
        pods = core.list_namespaced_pod(namespace, label_selector=f"{cluster_state.INSTANCE}={release}").items
        names = sorted(p.metadata.name for p in pods)
        now = time.monotonic()
        if not names or now - t0 >= timeout:
            return names
        if now - last >= 15:
            say(f"{len(names)} pod(s) of release {release} still stopping")
            last = now
        time.sleep(every)


def diagnostics(api, namespace: str, release: str, tail: int = 30) -> str:
    """Logs of the pods that failed or are stuck, and the namespace's Warning events."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    snap = snapshot(api, namespace, release)
    out = snap.failed_jobs()
    for p in snap.pods:
        if not cluster_state.needs_a_look(p):
            continue
        text = pod_log(api, namespace, p, tail) or "(no log)"
        out.append(
            f"--- pod {p.metadata.name} ({cluster_state.termination(p)}), last {tail} log lines:\n{text.rstrip()}"
        )
        advice = cluster_state.memory_advice(p)
        if advice:
            out.append(f"    {advice}")
    events = warning_events(core, namespace, last=20)
    if events:
        out.append("--- Warning events:")
        out += events
    return "\n".join(out)


def warning_events(core, namespace: str, last: int) -> list[str]:
    """The namespace's `last` Warning events in the order they happened (the API lists them by name),
    one line each: `  Kind/name: Reason: message`."""
    events = sorted(
        (e for e in core.list_namespaced_event(namespace).items if e.type == "Warning"),
        key=lambda e: e.last_timestamp or e.event_time or e.metadata.creation_timestamp,
    )
    return [f"  {e.involved_object.kind}/{e.involved_object.name}: {e.reason}: {e.message}" for e in events[-last:]]


RELEASE_KINDS = (
    "Job",
    "Pod",
    "Service",
    "ConfigMap",
    "ServiceAccount",
    "PersistentVolumeClaim",
    "Role",
    "RoleBinding",
    "NetworkPolicy",
    "Deployment",
    "Secret",
)


def release_objects(api, namespace: str, release: str, *, count_terminating: bool = True) -> list[str]:
    """Every namespaced object of the release (by its instance label), as `Kind/name`.
    `count_terminating=False` leaves out objects already being deleted (deletionTimestamp set): for an
    API server without a controller-manager, where a claim's pvc-protection finalizer is never released."""
    from kubernetes import client

    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    listers = {
        "Job": client.BatchV1Api(api).list_namespaced_job,
        "Pod": core.list_namespaced_pod,
        "Service": core.list_namespaced_service,
        "ConfigMap": core.list_namespaced_config_map,
        "ServiceAccount": core.list_namespaced_service_account,
        "PersistentVolumeClaim": core.list_namespaced_persistent_volume_claim,
        "Role": rbac.list_namespaced_role,
        "RoleBinding": rbac.list_namespaced_role_binding,
        "NetworkPolicy": client.NetworkingV1Api(api).list_namespaced_network_policy,
        "Deployment": client.AppsV1Api(api).list_namespaced_deployment,
        "Secret": core.list_namespaced_secret,
    }
    sel = f"{cluster_state.INSTANCE}={release}"
    return sorted(
        f"{kind}/{o.metadata.name}"
        for kind in RELEASE_KINDS
        for o in listers[kind](namespace, label_selector=sel).items
        if count_terminating or o.metadata.deletion_timestamp is None
    )


LAUNCHER_EVENTS = "tf-cluster-launcher"  # the Events' source component (files/launcher.py, Events)


def launcher_events(api, namespace: str, pods: list, latest: int = 5) -> list[str]:
    """The latest lifecycle Events the launchers of `pods` recorded on them (waited for peers,
    fenced a peer, stopped with the leader, restarted the coordinator), newest last, one line each."""
    from kubernetes import client

    names = {p.metadata.name for p in pods}
    items = client.CoreV1Api(api).list_namespaced_event(namespace, field_selector=f"source={LAUNCHER_EVENTS}").items
    mine = [e for e in items if e.involved_object.name in names]
    mine.sort(key=lambda e: e.last_timestamp or e.metadata.creation_timestamp)
    lines = []
    for e in mine[-latest:]:
        when = (e.last_timestamp or e.metadata.creation_timestamp).strftime("%H:%M:%S")
        times = f" (x{e.count})" if (e.count or 1) > 1 else ""
        lines.append(f"{when} {e.involved_object.name} {e.reason}{times}: {e.message}")
    return lines


# ------------------------------------------------------------------ `tf-cluster status`, `logs`
def release_status(
    api, namespace: str, release: str, *, log_tail: int | None = LOG_TAIL
) -> tuple[cluster_state.Snapshot, RunReport, list[str]]:
    """A release already running on a cluster: its snapshot, its report (`RunReport.status()`
    prints it) and why its gangs wait (gang.explain, as smoke says it). UsageError when the
    namespace holds no Job or pod of the release."""
    snap = read_release(api, namespace, release)
    report = cluster_state.cluster_report(
        snap,
        f"namespace {namespace}, release {release}",
        lambda p: pod_log(api, namespace, p, tail_lines=log_tail),
        job_warnings=job_warnings(api, namespace, snap),
    )
    return snap, report, gang_lines(api, namespace, snap)


def read_release(api, namespace: str, release: str) -> cluster_state.Snapshot:
    """The release's Jobs and pods; an error a user can act on when the cluster cannot be read or
    holds no such release."""
    from kubernetes import client
    from urllib3.exceptions import HTTPError

    try:
        snap = snapshot(api, namespace, release)
    except client.ApiException as e:
        raise TfClusterError(f"cannot read the Jobs and pods of namespace {namespace}: {e.status} {e.reason}") from e
    except HTTPError as e:
        raise TfClusterError(f"cannot reach the cluster: {e}") from e
    if not snap.jobs and not snap.pods:
        raise UsageError(f"no pods or Jobs of release {release} in namespace {namespace}: helm list -n {namespace}")
    return snap


def job_warnings(api, namespace: str, snap: cluster_state.Snapshot) -> dict[str, str]:
    """The latest FailedCreate event of each running Job that owes pods (a quota, a policy that refused them)."""
    from kubernetes import client

    owing = snap.owing_jobs()
    if not owing:
        return {}
    out: dict[str, str] = {}
    try:
        events = client.CoreV1Api(api).list_namespaced_event(namespace, field_selector="involvedObject.kind=Job").items
    except client.ApiException:
        return {}  # events are a hint: a user who may not read them still gets the rest
    for e in sorted(events, key=lambda e: e.last_timestamp or e.event_time or e.metadata.creation_timestamp):
        if e.involved_object.name in owing and e.reason == "FailedCreate":
            out[e.involved_object.name] = f"{e.reason}: {e.message}"
    return out


def gang_lines(api, namespace: str, snap: cluster_state.Snapshot) -> list[str]:
    """Why the release's gangs wait (none when every gang is placed)."""
    from kubernetes import client

    if not any(g.unbound for g in gang.gangs(snap).values()):
        return []
    try:
        return gang.explain(api, namespace, snap)[0]
    except client.ApiException as e:
        return [f"a gang waits; cannot say why: reading nodes and PodGroups was refused ({e.status} {e.reason})"]
