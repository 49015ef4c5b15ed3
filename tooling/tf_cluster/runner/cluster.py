"""The release installed with Helm on a real cluster, watched through the Kubernetes API.

`ClusterRunner` installs, watches and removes a release (`tf-cluster smoke`); `release_status`
reads one that is already running (`tf-cluster status`). Both describe it the same way
(`cluster_report`: Jobs and tasks from the Job and pod objects, progress from the pods' logs).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any

from .. import gang, kube
from ..errors import RunError, TfClusterError, UsageError
from ..helm import Helm, Values
from ..progress import TaskProgress
from . import Cancel, JobReport, Runner, RunReport, Say, TaskReport

TERMINAL = {"Succeeded": "succeeded", "Failed": "failed", "Running": "running", "Pending": "pending"}
#: log lines read per task for its progress by `tf-cluster status` (the latest epoch is near the end)
LOG_TAIL = 5000
JOB_CONTROLLER_GRACE = 30  # seconds a Job may take to create its pods before status asks whether anything does
LogOf = Callable[[object], str]  # a pod -> its log ("" when there is none)


class ClusterRunner(Runner):
    """`helm install` into a namespace (created, and later deleted, if missing), Job conditions
    by type, `helm test`, `helm uninstall`. `keep` leaves the release installed on stop."""

    def __init__(
        self, helm: Helm, release: str, values: Values, *, keep: bool = False, stuck_grace: float = 60, say: Say = print
    ) -> None:
        if not (helm.kubeconfig and helm.namespace):
            raise ValueError("ClusterRunner needs a Helm bound to a kubeconfig and a namespace")
        self.helm, self.release, self.values, self.keep = helm, release, values, keep
        self.namespace: str = helm.namespace
        self.api = kube.client_for(str(helm.kubeconfig))
        self.where = f"namespace {self.namespace}, release {release}"
        self.stuck_grace = stuck_grace
        self.say = say
        self.created_namespace = False
        self.installing = False
        self.installed = False
        self._stopped = False

    def start(self) -> None:
        self.created_namespace = kube.ensure_namespace(self.api, self.namespace)
        self.say(f"namespace {self.namespace} " + ("created" if self.created_namespace else "exists"))
        self.say(f"helm {self.helm.major} install {self.release} -n {self.namespace} {self.values.describe()}")
        self.installing = True  # a signal during the install: stop() removes whatever part of it landed
        self.helm.install(self.release, self.values, check=True)
        self.installed = True

    def watch(self, timeout: float, on_update: Say = print, cancel: Cancel | None = None) -> RunReport:
        on_update("waiting for every Job to reach Complete or Failed (progress every 15 s)")
        kube.wait_for_jobs(
            self.api,
            self.namespace,
            self.release,
            timeout=timeout,
            say=on_update,
            stuck_grace=self.stuck_grace,
            cancel=cancel,
        )
        return self.report()

    def report(self) -> RunReport:
        snap = kube.snapshot(self.api, self.namespace, self.release)
        return cluster_report(snap, self.where, lambda p: kube.pod_log(self.api, self.namespace, p))

    def check(self) -> None:
        """`helm test`. Not `--logs`: Helm 3.17 fetches logs after a passed test's Pod is deleted
        (the chart's default hook-delete policy); a failed test's Pod is kept, and its log is shown."""
        self.say("helm test")
        proc = self.helm.test(self.release)
        phase = next(
            (ln.split(":", 1)[1].strip() for ln in proc.stdout.splitlines() if ln.strip().startswith("Phase:")), "?"
        )
        if proc.returncode == 0:
            self.say(f"helm test passed (test Pod phase {phase})")
            return
        logs = kube.logs_of(self.api, self.namespace, f"{kube.INSTANCE}={self.release},{kube.COMPONENT}=test")
        raise RunError(f"helm test failed (phase {phase}): {(proc.stderr or proc.stdout).strip()[-800:]}\n{logs}")

    def diagnostics(self) -> str:
        return kube.diagnostics(self.api, self.namespace, self.release)

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        if self.keep:
            self.say(f"kept: helm -n {self.namespace} uninstall {self.release}  (KUBECONFIG={self.helm.kubeconfig})")
            return
        try:
            if self.installed:
                self.say(f"helm uninstall {self.release}")
                self.helm.uninstall(self.release, wait=True, timeout="3m", check=True)
            elif self.installing:  # stopped mid-install: the release may exist, or not
                if self.helm.uninstall(self.release, wait=True, timeout="3m").returncode == 0:
                    self.say(f"helm uninstall {self.release} (stopped while it was installed)")
        finally:  # a failed uninstall still removes the namespace this runner made (and what is left in it)
            if self.created_namespace:
                kube.delete_namespace(self.api, self.namespace)
                self.say(f"namespace {self.namespace} deleted")


# ------------------------------------------------------------------ the release as it stands
def cluster_report(
    snap: kube.Snapshot,
    where: str,
    log_of: LogOf,
    *,
    job_warnings: Mapping[str, str] | None = None,
    now: datetime | None = None,
) -> RunReport:
    """Jobs and tasks of a snapshot: each task's newest pod (state, why it waits or failed), its
    restarts, its time and what its log reported; tasks a running Job has no pod for yet are listed
    too (`job_warnings`: a Job's latest FailedCreate event, e.g. a quota, says why)."""
    jobs = [job_report(job) for _, job in sorted(snap.jobs.items())]
    return RunReport(where, jobs, task_reports(snap, log_of, job_warnings or {}, now or datetime.now(timezone.utc)))


def job_report(job) -> JobReport:
    state = kube.job_state(job)
    if state == "Running":
        return JobReport(job.metadata.name, kube.role_of(job), "", job_progress(job))
    return JobReport(job.metadata.name, kube.role_of(job), state, kube.failed_reason(job) if state == "Failed" else "")


def job_progress(job) -> str:
    """A running Job in words: `1/2 done, 1 active, 1 failed (indexes 1)`, with its conditions that
    are True (Suspended; FailureTarget or SuccessCriteriaMet: it is about to end)."""
    st, want = job.status, job.spec.completions or 1
    parts = [f"{(st and st.succeeded) or 0}/{want} done"]
    if st and st.active:
        parts.append(f"{st.active} active")
    if st and st.failed:
        parts.append(f"{st.failed} failed" + (f" (indexes {st.failed_indexes})" if st.failed_indexes else ""))
    if job.spec.suspend:
        queue = (job.metadata.labels or {}).get("kueue.x-k8s.io/queue-name")
        parts.append("suspended" + (f": waits in Kueue queue {queue}" if queue else ""))
    for c in (st and st.conditions) or []:
        if c.status == "True" and c.type not in ("Complete", "Failed", "Suspended"):
            parts.append(
                c.type + (f" ({c.reason}: {c.message})" if c.message else f" ({c.reason})" if c.reason else "")
            )
    return ", ".join(parts)


def indexes(text: str | None) -> set[int]:
    """A Job's completedIndexes / failedIndexes (`0,2-4`) as a set."""
    out: set[int] = set()
    for part in (text or "").split(","):
        first, _, last = part.strip().partition("-")
        if first.isdigit():
            out.update(range(int(first), int(last or first) + 1))
    return out


def task_reports(
    snap: kube.Snapshot, log_of: LogOf, job_warnings: Mapping[str, str], now: datetime
) -> list[TaskReport]:
    by_task: dict[tuple[str, int], list] = {}
    for p in snap.pods:
        by_task.setdefault(kube.task_of(p), []).append(p)
    jobs_of: dict[tuple[str, int], Any] = {}
    for job in snap.jobs.values():
        for i in range((job.spec.completions or 1) if kube.job_state(job) == "Running" else 0):
            jobs_of[(kube.role_of(job), i)] = job
            by_task.setdefault((kube.role_of(job), i), [])
    tasks = []
    for (role, index), pods in sorted(by_task.items(), key=lambda kv: kube.task_order(kv[0])):
        name = f"{role}-{index}"
        if not pods:
            job = jobs_of[(role, index)]
            tasks.append(podless_task(name, role, index, job, job_warnings.get(job.metadata.name, ""), now))
            continue
        pods.sort(key=lambda p: p.metadata.creation_timestamp)
        last = pods[-1]
        job = snap.jobs.get((last.metadata.labels or {}).get(kube.JOB_NAME_LABEL))
        state, detail, why = pod_state(last, job)
        if len(pods) > 1 and pods[-2].status and pods[-2].status.phase == "Failed" and state != "failed":
            before = failed_reason(pods[-2], None)[1]
            why = "; ".join(filter(None, [why, f"its previous pod failed ({before})" if before else ""]))
        # progress from the newest pod that started (a replacement not started yet: its predecessor's)
        started = [p for p in pods if p.status and p.status.start_time]
        tasks.append(
            TaskReport(
                name,
                role,
                index,
                state,
                restarts=restarts(pods),
                exit_codes=[c for c in (kube.exit_code(p) for p in pods) if c is not None],
                seconds=task_seconds(pods, now),
                reported=TaskProgress.of_log(log_of(started[-1])) if started else TaskProgress(),
                detail=detail,
                why=why,
            )
        )
    return tasks


def podless_task(name: str, role: str, index: int, job, warning: str, now: datetime) -> TaskReport:
    """A task of a running Job that has no pod (yet, or any more)."""
    if index in indexes(job.status and job.status.completed_indexes):
        return TaskReport(name, role, index, "succeeded", detail="pod gone")
    if index in indexes(job.status and job.status.failed_indexes):
        return TaskReport(name, role, index, "failed", detail="pod gone")
    if job.spec.suspend:
        queue = (job.metadata.labels or {}).get("kueue.x-k8s.io/queue-name")
        why = f"Job {job.metadata.name} is suspended" + (
            f": it waits in Kueue queue {queue} for quota" if queue else ""
        )
        return TaskReport(name, role, index, "pending", detail="suspended", why=why)
    why = f"Job {job.metadata.name} has not created its pod"
    age = (now - job.metadata.creation_timestamp).total_seconds() if job.metadata.creation_timestamp else 0
    if warning:
        why += f": {warning}"
    elif age >= JOB_CONTROLLER_GRACE:
        why += f" in {age:.0f}s: is the cluster's Job controller (kube-controller-manager) running?"
    else:
        why += " yet"
    return TaskReport(name, role, index, "pending", detail="no pod", why=why)


def restarts(pods: list) -> int:
    """How often a task was restarted: its index's failures before the newest pod (the Job's
    failure-count annotations, counted and ignored) or the pods before it, whichever is more, and
    its container's restarts."""
    last = pods[-1]
    notes = last.metadata.annotations or {}
    counted = sum(int(notes.get(k, "0") or 0) for k in (kube.FAILURE_COUNT, kube.IGNORED_COUNT))
    containers = sum(cs.restart_count or 0 for cs in (last.status and last.status.container_statuses) or [])
    return max(counted, len(pods) - 1) + containers


def task_seconds(pods: list, now: datetime) -> float | None:
    """From the first pod's start to the newest one's end, or to `now` while it runs."""
    first = min((p.status.start_time for p in pods if p.status and p.status.start_time), default=None)
    if first is None:
        return None
    last = pods[-1]
    if last.status.phase in ("Succeeded", "Failed"):
        end = max(
            (
                cs.state.terminated.finished_at
                for cs in last.status.container_statuses or []
                if cs.state and cs.state.terminated and cs.state.terminated.finished_at
            ),
            default=None,
        )
        return (end - first).total_seconds() if end else None
    return max((now - first).total_seconds(), 0.0)


def pod_state(pod, job=None) -> tuple[str, str, str]:
    """(state, detail, why) of a task's newest pod: state as the runner seam names it (pending,
    running, backoff, succeeded, failed, terminating), a word or two beside it, and the reason it
    waits or failed in the words of the scheduler, the kubelet or its Job."""
    st = pod.status
    phase = (st and st.phase) or "Pending"
    if pod.metadata.deletion_timestamp and phase in ("Pending", "Running"):
        return "terminating", "", ""
    if phase == "Pending":
        return ("pending", *pending_reason(pod))
    if phase == "Running":
        return "running", "", ""
    if phase == "Succeeded":
        return "succeeded", "", ""
    if phase != "Failed":
        return phase.lower(), "", ""
    return failed_reason(pod, job)


def pending_reason(pod) -> tuple[str, str]:
    """Why a Pending pod is not running yet: not placed (the scheduler's condition, scheduling
    gates, no scheduler), or placed and its containers waiting (ContainerCreating, ImagePullBackOff)."""
    st = pod.status
    if not pod.spec.node_name:
        for c in (st and st.conditions) or []:
            if c.type == "PodScheduled" and c.status == "False":
                reason = c.reason or "unscheduled"
                return reason, f"{reason}: {c.message}{kube.volume_hint(c.message)}" if c.message else ""
        gates = [g.name for g in pod.spec.scheduling_gates or []]
        if gates:
            return "SchedulingGated", f"scheduling gates not yet removed: {', '.join(gates)}"
        return "unscheduled", "no scheduler has placed it yet"
    for cs in [*((st and st.init_container_statuses) or []), *((st and st.container_statuses) or [])]:
        waiting = cs.state and cs.state.waiting
        if waiting and waiting.reason:
            return waiting.reason, f"{waiting.reason}: {waiting.message}" if waiting.message else ""
    return "starting", ""


def failed_reason(pod, job) -> tuple[str, str, str]:
    """A failed pod: "backoff" while its Job will replace it, else "failed"; its exit code and how
    it ended (OOMKilled, Evicted), and the rule that judged it (the Job's podFailurePolicy message,
    a disruption it was not counted for)."""
    st = pod.status
    code = kube.exit_code(pod)
    ended = next(
        (cs.state.terminated for cs in st.container_statuses or [] if cs.name == "tensorflow" and cs.state), None
    )
    how = ended.reason if ended and ended.reason not in (None, "Error", "Completed") else (st.reason or "")
    detail = ", ".join(([f"exit {code}"] if code is not None else []) + ([how] if how else []))
    why = []
    for c in (job and job.status and job.status.conditions) or []:
        if (
            c.status == "True"
            and c.type in ("FailureTarget", "Failed")
            and re.search(rf"/{pod.metadata.name}\b", c.message or "")
        ):
            why.append(f"{c.reason}: {c.message}")
            break
    for c in st.conditions or []:
        if c.type == "DisruptionTarget" and c.status == "True":
            why.append(f"disrupted ({c.reason}: {c.message}): not counted against its retries")
    if st.message:
        why.append(st.message)
    if ended and ended.message:
        why.append(ended.message.strip().splitlines()[-1][:300])
    if how == "OOMKilled":
        role = (pod.metadata.labels or {}).get(kube.COMPONENT, "<role>")
        why.append(f"it used more memory than its limit: raise roles.{role}.resources.limits.memory")
    index = kube.task_of(pod)[1]
    retried = (
        job is not None
        and kube.job_state(job) == "Running"
        and not kube.condition(job, "FailureTarget")
        and index not in indexes(job.status and job.status.failed_indexes)
    )
    return "backoff" if retried else "failed", detail, "; ".join(why)


def release_status(
    api, namespace: str, release: str, *, log_tail: int | None = LOG_TAIL
) -> tuple[kube.Snapshot, RunReport, list[str]]:
    """A release already running on a cluster: its snapshot, its report (`RunReport.status()`
    prints it) and why its gangs wait (gang.explain, as smoke says it). UsageError when the
    namespace holds no Job or pod of the release."""
    snap = read_release(api, namespace, release)
    report = cluster_report(
        snap,
        f"namespace {namespace}, release {release}",
        lambda p: kube.pod_log(api, namespace, p, tail_lines=log_tail),
        job_warnings=job_warnings(api, namespace, snap),
    )
    return snap, report, gang_lines(api, namespace, snap)


def read_release(api, namespace: str, release: str) -> kube.Snapshot:
    """The release's Jobs and pods; an error a user can act on when the cluster cannot be read or
    holds no such release."""
    from kubernetes import client
    from urllib3.exceptions import HTTPError

    try:
        snap = kube.snapshot(api, namespace, release)
    except client.ApiException as e:
        raise TfClusterError(f"cannot read the Jobs and pods of namespace {namespace}: {e.status} {e.reason}") from e
    except HTTPError as e:
        raise TfClusterError(f"cannot reach the cluster: {e}") from e
    if not snap.jobs and not snap.pods:
        raise UsageError(f"no pods or Jobs of release {release} in namespace {namespace}: helm list -n {namespace}")
    return snap


def job_warnings(api, namespace: str, snap: kube.Snapshot) -> dict[str, str]:
    """The latest FailedCreate event of each running Job that owes pods (a quota, a policy that refused them)."""
    from kubernetes import client

    placed = {((p.metadata.labels or {}).get(kube.JOB_NAME_LABEL), kube.task_of(p)[1]) for p in snap.pods}
    owing = [
        n
        for n, j in snap.jobs.items()
        if kube.job_state(j) == "Running" and sum(job == n for job, _ in placed) < (j.spec.completions or 1)
    ]
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


def gang_lines(api, namespace: str, snap: kube.Snapshot) -> list[str]:
    """Why the release's gangs wait (none when every gang is placed)."""
    from kubernetes import client

    if not any(g.unbound for g in gang.gangs(snap).values()):
        return []
    try:
        return gang.explain(api, namespace, snap)[0]
    except client.ApiException as e:
        return [f"a gang waits; cannot say why: reading nodes and PodGroups was refused ({e.status} {e.reason})"]
