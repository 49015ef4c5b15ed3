"""Watching a release's Jobs on a real cluster: conditions by type, pod problems, diagnostics.

Shared by `tf-cluster smoke` and the cluster e2e tests. A Job is finished when it
has a condition of type `Complete` or `Failed` with status True (never "the
first condition", which is `SuccessCriteriaMet`/`FailureTarget` from k8s 1.31).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from . import gang, progress, roles
from .errors import RunError, UsageError, yaml_problem

INSTANCE = "app.kubernetes.io/instance"
COMPONENT = "app.kubernetes.io/component"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
# on a Job's pod (backoffLimitPerIndex): how often its index failed before it, counted or ignored (podFailurePolicy)
FAILURE_COUNT = "batch.kubernetes.io/job-index-failure-count"
IGNORED_COUNT = "batch.kubernetes.io/job-index-ignored-failure-count"
# a pod waiting for one of these will not start by itself: report it instead of waiting out the timeout
STUCK_REASONS = {
    "ErrImagePull",
    "ImagePullBackOff",
    "ErrImageNeverPull",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
}


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


def condition(obj, type_: str) -> bool:
    """True when `obj.status.conditions` has `type_` with status True."""
    for c in (obj.status.conditions or []) if obj.status else []:
        if c.type == type_ and c.status == "True":
            return True
    return False


def job_state(job) -> str:
    if condition(job, "Failed"):
        return "Failed"
    if condition(job, "Complete"):
        return "Complete"
    return "Running"


def role_of(obj) -> str:
    """The chart's role of a Job or pod (its component label)."""
    return (obj.metadata.labels or {}).get(COMPONENT, obj.metadata.name)


def task_order(key: tuple[str, int]) -> tuple[int, int]:
    role, index = key
    return roles.order(role), index


def task_of(pod) -> tuple[str, int]:
    """(role, index) of one of the chart's Job pods, from its component and completion-index labels."""
    labels = pod.metadata.labels or {}
    return labels.get(COMPONENT, "task"), int(labels.get(INDEX_LABEL, "0"))


def _tensorflow_ended(pod, last: bool = False):
    """How the pod's `tensorflow` container ended (its current state, or with `last` also its
    previous run's), or None while it runs."""
    for cs in pod.status.container_statuses or []:
        if cs.name == "tensorflow":
            ended = cs.state and cs.state.terminated
            return ended or (last and cs.last_state and cs.last_state.terminated) or None
    return None


def exit_code(pod) -> int | None:
    """Exit code of the pod's `tensorflow` container once it terminated."""
    ended = _tensorflow_ended(pod)
    return ended.exit_code if ended else None


def kubelet_time(stamp: str) -> float:
    """A pod log line's timestamp (`kubectl logs --timestamps`: RFC 3339 with nanoseconds) as epoch seconds."""
    from datetime import datetime

    head, _, frac = stamp.rstrip("Z").partition(".")
    return datetime.fromisoformat(head + "+00:00").timestamp() + float("0." + (frac or "0"))


def pod_seconds(pods) -> float | None:
    """From the first pod's start to the last one's end (or None while it runs)."""
    first = min((p.status.start_time for p in pods if p.status.start_time), default=None)
    ends = [
        cs.state.terminated.finished_at
        for p in pods
        for cs in p.status.container_statuses or []
        if cs.state and cs.state.terminated and cs.state.terminated.finished_at
    ]
    return (max(ends) - first).total_seconds() if first and ends else None


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


def failed_reason(job) -> str:
    for c in job.status.conditions or []:
        if c.type == "Failed" and c.status == "True":
            return f"{c.reason}: {c.message}" if c.message else (c.reason or "")
    return ""


@dataclass
class Snapshot:
    jobs: dict = field(default_factory=dict)  # name -> V1Job
    pods: list = field(default_factory=list)  # V1Pod of the release's Jobs

    @classmethod
    def of(cls, jobs, pods) -> Snapshot:
        """From Jobs and pods as the client gives them or as dicts (their JSON: YAML, `kubectl get -o json`)."""
        from kubernetes import client

        job_models = [client.V1Job.from_dict(j) if isinstance(j, dict) else j for j in jobs]
        pod_models = [client.V1Pod.from_dict(p) if isinstance(p, dict) else p for p in pods]
        return cls({j.metadata.name: j for j in job_models}, pod_models)

    def states(self) -> dict[str, str]:
        return {n: job_state(j) for n, j in self.jobs.items()}

    def finished(self) -> bool:
        return bool(self.jobs) and all(s != "Running" for s in self.states().values())

    def role_line(self) -> str:
        """One line: per role, indexes done of wanted and what its live pods are doing."""
        parts = []
        for name, job in sorted(self.jobs.items()):
            role = role_of(job)
            state = job_state(job)
            if state != "Running":
                parts.append(f"{role} {state}")
                continue
            want, st = job.spec.completions or 1, job.status
            doing: dict[str, int] = {}
            for p in self.pods:
                if (p.metadata.labels or {}).get(JOB_NAME_LABEL) != name or p.metadata.deletion_timestamp:
                    continue
                if p.status.phase in ("Running", "Pending"):
                    what = p.status.phase.lower()
                    for cs in p.status.container_statuses or []:
                        if cs.state and cs.state.waiting and cs.state.waiting.reason:
                            what = cs.state.waiting.reason
                    for c in p.status.conditions or []:
                        if c.type == "PodScheduled" and c.status == "False":
                            what = "unscheduled"
                    doing[what] = doing.get(what, 0) + 1
            live = ", ".join(f"{n} {w}" for w, n in sorted(doing.items()))
            parts.append(
                f"{role} {st.succeeded or 0}/{want} done"
                + (f" ({live})" if live else "")
                + (f", {st.failed} failed" if st.failed else "")
            )
        return " | ".join(parts)

    def stuck(self, skip: frozenset[str] | set[str] = frozenset()) -> list[str]:
        """Why pods cannot start, leaving out the pods named in `skip`."""
        out = []
        for p in self.pods:
            if p.metadata.name in skip:
                continue
            for cs in (p.status.container_statuses or []) + (p.status.init_container_statuses or []):
                w = cs.state.waiting if cs.state else None
                if w and w.reason in STUCK_REASONS:
                    out.append(f"pod {p.metadata.name}: {w.reason}: {w.message or ''}".strip())
            for c in p.status.conditions or []:
                if c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable":
                    out.append(f"pod {p.metadata.name} cannot be scheduled: {c.message}{volume_hint(c.message)}")
        return out


def volume_hint(message: str | None) -> str:
    """What to change when the scheduler's message says a claim keeps pods off the other nodes."""
    text = message or ""
    if "volume node affinity conflict" in text:
        return (
            ". A claim it mounts is bound to a volume on another node (ReadWriteOnce, node-local), so the "
            "release's pods cannot spread over nodes: give it a ReadWriteMany claim (storage.<volume>.accessModes "
            "and storageClass, or an existingClaim that is ReadWriteMany), or set scheduling.singleNode=true to "
            "place every pod on that node"
        )
    if "didn't find available persistent volumes to bind" in text:
        return (
            ". Its claim cannot be bound where the pod fits: a WaitForFirstConsumer class pins the claim to the "
            "first pod's node while a gang spread over nodes waits; use a class with volumeBindingMode: Immediate "
            "for shared claims (docs/user-guide/storage.md), or scheduling.singleNode=true"
        )
    return ""


def serves_gang_api(api) -> bool:
    """Whether the cluster serves Kubernetes' gang API (scheduling.k8s.io/v1beta1 PodGroup, 1.37+)."""
    from kubernetes import client

    for group in client.ApisApi(api).get_api_versions().groups:
        if group.name == "scheduling.k8s.io" and any(v.version == "v1beta1" for v in group.versions):
            return "podgroups" in {r.name for r in client.SchedulingV1beta1Api(api).get_api_resources().resources}
    return False


def snapshot(api, namespace: str, release: str) -> Snapshot:
    from kubernetes import client

    sel = f"{INSTANCE}={release}"
    jobs = {j.metadata.name: j for j in client.BatchV1Api(api).list_namespaced_job(namespace, label_selector=sel).items}
    pods = [
        p
        for p in client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=sel).items
        if (p.metadata.labels or {}).get(JOB_NAME_LABEL) in jobs
    ]
    return Snapshot(jobs, pods)


def leader_log_line(api, namespace: str, snap: Snapshot) -> str:
    """The leading task's (index 0 of the first role that may lead) latest progress in words,
    else its last log line."""
    running = [p for p in snap.pods if p.status.phase == "Running"]
    for role in roles.LEADERS:
        for p in running:
            labels = p.metadata.labels or {}
            if labels.get(COMPONENT) == role and labels.get(INDEX_LABEL, "0") == "0":
                text = pod_log(api, namespace, p, tail_lines=40)
                reported = progress.TaskProgress.of_log(text)
                if reported.progress:
                    return f"{role}-0: {reported.summary()}"
                lines = [ln for ln in text.splitlines() if ln.strip()]
                if not lines:
                    return ""
                msg = progress.parse(lines[-1])
                return f"{role}-0: {msg.describe() if msg else lines[-1].strip()[-160:]}"
    return ""


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
) -> Snapshot:
    """Wait until every Job of the release is Complete or Failed; report progress as it goes.

    Returns the final snapshot (callers decide what Failed means), or the current one as soon as
    `cancel()` gives a reason. Raises RunError on timeout or when a pod is stuck (bad image,
    unschedulable, bad config) for `stuck_grace` seconds.
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
        reason = cancel() if cancel else ""
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


def termination(pod) -> str:
    """The pod's phase, and how its `tensorflow` container last ended: "Failed, exit 137 (OOMKilled)"."""
    ended = _tensorflow_ended(pod, last=True)
    if not ended:
        return pod.status.phase
    return f"{pod.status.phase}, exit {ended.exit_code}" + (f" ({ended.reason})" if ended.reason else "")


def diagnostics(api, namespace: str, release: str, tail: int = 30) -> str:
    """Logs of the pods that failed or are stuck, and the namespace's Warning events."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    snap = snapshot(api, namespace, release)
    out = []
    for name, job in sorted(snap.jobs.items()):
        if job_state(job) == "Failed":
            out.append(f"Job {name} Failed: {failed_reason(job)}")
    for p in snap.pods:
        bad = p.status.phase == "Failed" or any(
            (cs.restart_count or 0) > 0
            or (cs.state and cs.state.waiting and cs.state.waiting.reason in STUCK_REASONS)
            or (cs.state and cs.state.terminated and cs.state.terminated.exit_code)
            for cs in p.status.container_statuses or []
        )
        if not bad:
            continue
        text = pod_log(api, namespace, p, tail) or "(no log)"
        ended = termination(p)
        out.append(f"--- pod {p.metadata.name} ({ended}), last {tail} log lines:\n{text.rstrip()}")
        if "OOMKilled" in ended:
            role = (p.metadata.labels or {}).get(COMPONENT, "<role>")
            out.append(
                f"    {p.metadata.name} used more memory than its limit and the kernel killed it: raise "
                f"roles.{role}.resources.limits.memory (or lower the batch size)"
            )
    events = [e for e in core.list_namespaced_event(namespace).items if e.type == "Warning"]
    if events:
        out.append("--- Warning events:")
        out += [f"  {e.involved_object.kind}/{e.involved_object.name}: {e.reason}: {e.message}" for e in events[-20:]]
    return "\n".join(out)


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
    sel = f"{INSTANCE}={release}"
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
