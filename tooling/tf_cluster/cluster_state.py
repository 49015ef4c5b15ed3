"""What a release's Job and pod objects say: Job conditions, task states, failed reasons, exit
codes, why pods wait or cannot start, and the release as a `RunReport`.

The one module that interprets cluster state, for `tf-cluster smoke`, `status`, `logs`, `tune`
and the tests. It makes no API call: `kube` fetches the objects (and logs, events) and hands them
here; nothing here imports `kube`. Objects are the client's models (`Snapshot.of` also takes their
JSON). A Job is finished when it has a condition of type `Complete` or `Failed` with status True
(never "the first condition", which is `SuccessCriteriaMet`/`FailureTarget` from k8s 1.31).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from . import roles
from .progress import TaskProgress
from .runner import JobReport, RunReport, TaskReport

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
JOB_CONTROLLER_GRACE = 30  # seconds a Job may take to create its pods before status asks whether anything does
LogOf = Callable[[Any], str]  # a pod -> its log ("" when there is none)


# ------------------------------------------------------------------ Jobs
def condition(obj: Any, type_: str) -> bool:
    """True when `obj.status.conditions` has `type_` with status True."""
    for c in (obj.status.conditions or []) if obj.status else []:
        if c.type == type_ and c.status == "True":
            return True
    return False


def job_state(job: Any) -> str:
    if condition(job, "Failed"):
        return "Failed"
    if condition(job, "Complete"):
        return "Complete"
    return "Running"


def failed_reason(job: Any) -> str:
    """Why a Job failed: its Failed condition's reason and message ("" while it has none)."""
    for c in job.status.conditions or []:
        if c.type == "Failed" and c.status == "True":
            return f"{c.reason}: {c.message}" if c.message else (c.reason or "")
    return ""


def job_progress(job: Any) -> str:
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


# ------------------------------------------------------------------ pods
def role_of(obj: Any) -> str:
    """The chart's role of a Job or pod (its component label)."""
    return (obj.metadata.labels or {}).get(COMPONENT, obj.metadata.name)


def task_order(key: tuple[str, int]) -> tuple[int, int]:
    role, index = key
    return roles.order(role), index


def task_of(pod: Any) -> tuple[str, int]:
    """(role, index) of one of the chart's Job pods, from its component and completion-index labels."""
    labels = pod.metadata.labels or {}
    return labels.get(COMPONENT, "task"), int(labels.get(INDEX_LABEL, "0"))


def _tensorflow_ended(pod: Any, last: bool = False) -> Any:
    """How the pod's `tensorflow` container ended (its current state, or with `last` also its
    previous run's), or None while it runs."""
    for cs in pod.status.container_statuses or []:
        if cs.name == "tensorflow":
            ended = cs.state and cs.state.terminated
            return ended or (last and cs.last_state and cs.last_state.terminated) or None
    return None


def exit_code(pod: Any) -> int | None:
    """Exit code of the pod's `tensorflow` container once it terminated."""
    ended = _tensorflow_ended(pod)
    return ended.exit_code if ended else None


def termination(pod: Any) -> str:
    """The pod's phase, and how its `tensorflow` container last ended: "Failed, exit 137 (OOMKilled)"."""
    ended = _tensorflow_ended(pod, last=True)
    if not ended:
        return pod.status.phase
    return f"{pod.status.phase}, exit {ended.exit_code}" + (f" ({ended.reason})" if ended.reason else "")


def needs_a_look(pod: Any) -> bool:
    """A pod whose log diagnostics show: it failed, restarted, exited non-zero or cannot start."""
    return pod.status.phase == "Failed" or any(
        (cs.restart_count or 0) > 0
        or (cs.state and cs.state.waiting and cs.state.waiting.reason in STUCK_REASONS)
        or (cs.state and cs.state.terminated and cs.state.terminated.exit_code)
        for cs in pod.status.container_statuses or []
    )


def memory_advice(pod: Any) -> str:
    """What to raise when the kernel killed the pod for its memory (OOMKilled), else ""."""
    if "OOMKilled" not in termination(pod):
        return ""
    role = (pod.metadata.labels or {}).get(COMPONENT, "<role>")
    return (
        f"{pod.metadata.name} used more memory than its limit and the kernel killed it: raise "
        f"roles.{role}.resources.limits.memory (or lower the batch size)"
    )


def pod_state(pod: Any, job: Any = None) -> tuple[str, str, str]:
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
    return pod_failure(pod, job)


def pending_reason(pod: Any) -> tuple[str, str]:
    """Why a Pending pod is not running yet: not placed (the scheduler's condition, scheduling
    gates, no scheduler), or placed and its containers waiting (ContainerCreating, ImagePullBackOff)."""
    st = pod.status
    if not pod.spec.node_name:
        for c in (st and st.conditions) or []:
            if c.type == "PodScheduled" and c.status == "False":
                reason = c.reason or "unscheduled"
                return reason, f"{reason}: {c.message}{volume_hint(c.message)}" if c.message else ""
        gates = [g.name for g in pod.spec.scheduling_gates or []]
        if gates:
            return "SchedulingGated", f"scheduling gates not yet removed: {', '.join(gates)}"
        return "unscheduled", "no scheduler has placed it yet"
    for cs in [*((st and st.init_container_statuses) or []), *((st and st.container_statuses) or [])]:
        waiting = cs.state and cs.state.waiting
        if waiting and waiting.reason:
            return waiting.reason, f"{waiting.reason}: {waiting.message}" if waiting.message else ""
    return "starting", ""


def pod_failure(pod: Any, job: Any) -> tuple[str, str, str]:
    """A failed pod: "backoff" while its Job will replace it, else "failed"; its exit code and how
    it ended (OOMKilled, Evicted), and the rule that judged it (the Job's podFailurePolicy message,
    a disruption it was not counted for)."""
    st = pod.status
    code = exit_code(pod)
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
        role = (pod.metadata.labels or {}).get(COMPONENT, "<role>")
        why.append(f"it used more memory than its limit: raise roles.{role}.resources.limits.memory")
    index = task_of(pod)[1]
    retried = (
        job is not None
        and job_state(job) == "Running"
        and not condition(job, "FailureTarget")
        and index not in indexes(job.status and job.status.failed_indexes)
    )
    return "backoff" if retried else "failed", detail, "; ".join(why)


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
            "for shared claims (tf-cluster docs storage), or scheduling.singleNode=true"
        )
    return ""


# ------------------------------------------------------------------ the release's Jobs and pods at one moment
@dataclass
class Snapshot:
    jobs: dict[str, Any] = field(default_factory=dict)  # name -> V1Job
    pods: list[Any] = field(default_factory=list)  # V1Pod of the release's Jobs

    @classmethod
    def of(cls, jobs: list[Any], pods: list[Any]) -> Snapshot:
        """From Jobs and pods as the client gives them or as dicts (their JSON: YAML, `kubectl get -o json`)."""
        from kubernetes import client

        job_models = [client.V1Job.from_dict(j) if isinstance(j, dict) else j for j in jobs]
        pod_models = [client.V1Pod.from_dict(p) if isinstance(p, dict) else p for p in pods]
        return cls({j.metadata.name: j for j in job_models}, pod_models)

    def states(self) -> dict[str, str]:
        return {n: job_state(j) for n, j in self.jobs.items()}

    def finished(self) -> bool:
        return bool(self.jobs) and all(s != "Running" for s in self.states().values())

    def started(self) -> bool:
        """Every task has begun: each Job is finished, or has a Running or Succeeded pod for every index."""
        if not self.jobs:
            return False
        for name, job in self.jobs.items():
            if job_state(job) != "Running":
                continue
            begun = {
                task_of(p)[1]
                for p in self.pods
                if (p.metadata.labels or {}).get(JOB_NAME_LABEL) == name
                and p.status.phase in ("Running", "Succeeded")
                and not p.metadata.deletion_timestamp
            }
            if len(begun) < (job.spec.completions or 1):
                return False
        return True

    def failed_jobs(self) -> list[str]:
        """One line per Failed Job, with its reason."""
        return [f"Job {n} Failed: {failed_reason(j)}" for n, j in sorted(self.jobs.items()) if job_state(j) == "Failed"]

    def leader(self) -> tuple[str, Any] | None:
        """The leading task's running pod (index 0 of the first role that may lead) and its role."""
        running = [p for p in self.pods if p.status.phase == "Running"]
        for role in roles.LEADERS:
            for p in running:
                labels = p.metadata.labels or {}
                if labels.get(COMPONENT) == role and labels.get(INDEX_LABEL, "0") == "0":
                    return role, p
        return None

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
            live = ", ".join(f"{n} {w}" for w, n in sorted(self._doing(name).items()))
            parts.append(
                f"{role} {st.succeeded or 0}/{want} done"
                + (f" ({live})" if live else "")
                + (f", {st.failed} failed" if st.failed else "")
            )
        return " | ".join(parts)

    def _doing(self, job_name: str) -> dict[str, int]:
        """What the Job's live pods are doing (running, pending, a waiting reason, unscheduled): how many each."""
        doing: dict[str, int] = {}
        for p in self.pods:
            if (p.metadata.labels or {}).get(JOB_NAME_LABEL) != job_name or p.metadata.deletion_timestamp:
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
        return doing

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

    def owing_jobs(self) -> list[str]:
        """The running Jobs that have fewer pods than completions (a quota or a policy may refuse them)."""
        placed = {((p.metadata.labels or {}).get(JOB_NAME_LABEL), task_of(p)[1]) for p in self.pods}
        return [
            n
            for n, j in self.jobs.items()
            if job_state(j) == "Running" and sum(job == n for job, _ in placed) < (j.spec.completions or 1)
        ]


# ------------------------------------------------------------------ the release as a report
def cluster_report(
    snap: Snapshot,
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


def job_report(job: Any) -> JobReport:
    state = job_state(job)
    if state == "Running":
        return JobReport(job.metadata.name, role_of(job), "", job_progress(job))
    return JobReport(job.metadata.name, role_of(job), state, failed_reason(job) if state == "Failed" else "")


def task_reports(snap: Snapshot, log_of: LogOf, job_warnings: Mapping[str, str], now: datetime) -> list[TaskReport]:
    by_task: dict[tuple[str, int], list[Any]] = {}
    for p in snap.pods:
        by_task.setdefault(task_of(p), []).append(p)
    jobs_of: dict[tuple[str, int], Any] = {}
    for job in snap.jobs.values():
        for i in range((job.spec.completions or 1) if job_state(job) == "Running" else 0):
            jobs_of[(role_of(job), i)] = job
            by_task.setdefault((role_of(job), i), [])
    tasks = []
    for (role, index), pods in sorted(by_task.items(), key=lambda kv: task_order(kv[0])):
        name = f"{role}-{index}"
        if not pods:
            job = jobs_of[(role, index)]
            tasks.append(podless_task(name, role, index, job, job_warnings.get(job.metadata.name, ""), now))
            continue
        pods.sort(key=lambda p: p.metadata.creation_timestamp)
        last = pods[-1]
        job = snap.jobs.get((last.metadata.labels or {}).get(JOB_NAME_LABEL, ""))
        state, detail, why = pod_state(last, job)
        if len(pods) > 1 and pods[-2].status and pods[-2].status.phase == "Failed" and state != "failed":
            before = pod_failure(pods[-2], None)[1]
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
                exit_codes=[c for c in (exit_code(p) for p in pods) if c is not None],
                seconds=task_seconds(pods, now),
                reported=TaskProgress.of_log(log_of(started[-1])) if started else TaskProgress(),
                detail=detail,
                why=why,
            )
        )
    return tasks


def podless_task(name: str, role: str, index: int, job: Any, warning: str, now: datetime) -> TaskReport:
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


def restarts(pods: list[Any]) -> int:
    """How often a task was restarted: its index's failures before the newest pod (the Job's
    failure-count annotations, counted and ignored) or the pods before it, whichever is more, and
    its container's restarts."""
    last = pods[-1]
    notes = last.metadata.annotations or {}
    counted = sum(int(notes.get(k, "0") or 0) for k in (FAILURE_COUNT, IGNORED_COUNT))
    containers = sum(cs.restart_count or 0 for cs in (last.status and last.status.container_statuses) or [])
    return max(counted, len(pods) - 1) + containers


def task_seconds(pods: list[Any], now: datetime) -> float | None:
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
