"""The Kubernetes Job controller's rules for the chart's Indexed Jobs, as a pure state machine.

No processes, threads, sleeps or I/O: the clock comes in with every event, pod exits and pod
conditions come in as events, and what the controller would do comes out as decisions (create
an index's pod, wait out its backoff, count or ignore a failure, fail an index, delete the
active pods, set a Job condition, tell the servers the leading Job finished). `local_cluster.py`
turns the decisions into processes; the unit tests feed events by hand.

    release = Release([JobSpec.from_manifest(doc, manifests.config_maps(docs)) for doc in jobs])
    release.handle(Start(at=0))                          # [CreatePod(job, 0, 0), ...]
    release.handle(PodExited(job, 0, exit_code=137, at=5))  # [PodFailure(...), Backoff(...)]
    release.handle(Tick(at=15))                          # [CreatePod(job, 0, 1)]

The rules, as Kubernetes' pkg/controller/job has them (job_controller.go `syncJob`,
pod_failure_policy.go, backoff_utils.go, success_policy.go):

- A failed pod is matched against the `podFailurePolicy` rules in order, the first match
  deciding: `onExitCodes` matches the container's non-zero exit code (`In`/`NotIn`; a pod
  without an exit code, e.g. one marked Failed on a lost node, matches no exit-code rule),
  `onPodConditions` a condition of the pod with status True (`DisruptionTarget`: evicted,
  preempted, deleted by the taint manager). No match counts the failure.
- Ignore: not counted; the index's ignored-failure count grows and the pod is replaced.
  Count: the index's failure count grows; past `backoffLimitPerIndex` the index fails,
  else the pod is replaced. FailIndex: the index fails at once. FailJob: the Job fails.
- A replacement waits its backoff: 10 s doubled for each failure of the index, counted and
  ignored alike (capped at 10 min); `podReplacementPolicy: Failed`: never while the old pod
  of the index still runs (here: until its exit came in).
- Then, in `syncJob`'s order, the first that holds finishes the Job: a FailJob match
  (FailureTarget, reason PodFailurePolicy); more counted failures than `backoffLimit`
  (BackoffLimitExceeded); active for `activeDeadlineSeconds` (DeadlineExceeded); more failed
  indexes than `maxFailedIndexes` (MaxFailedIndexesExceeded); every index succeeded or
  failed, some failed (FailedIndexes); a `successPolicy` rule met (SuccessCriteriaMet,
  reason SuccessPolicy). A finishing Job deletes its active pods, creates none, and takes
  its terminal condition (Failed, or Complete, with the same reason) once none is left.
  Otherwise it creates the pods that are due, and once every index succeeded it is
  SuccessCriteriaMet and Complete (CompletionsReached).

And the chart's rule across Jobs (`Release`): the servers' launchers
(TF_CLUSTER_STOP_WITH_LEADER=true) poll the leading Job (TF_CLUSTER_LEADER_JOB) and read
SuccessCriteriaMet/Complete as Complete, FailureTarget/Failed as Failed; so once the leading
Job has one of these, `LeaderFinished` says so, naming the Jobs whose launchers now stop their
task (exit 0 when Complete, 3 when Failed). The launchers do that; this module only decides.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import manifests

DISRUPTION_TARGET = "DisruptionTarget"
DEFAULT_BACKOFF_SECONDS = 10.0  # DefaultJobPodFailureBackOff
MAX_BACKOFF_SECONDS = 600.0  # MaxJobPodFailureBackOff
DEFAULT_BACKOFF_LIMIT = 6  # spec.backoffLimit's default without backoffLimitPerIndex
MAX_INT32 = 2**31 - 1  # ... and with it

# podFailurePolicy actions
FAIL_JOB, FAIL_INDEX, IGNORE, COUNT = "FailJob", "FailIndex", "Ignore", "Count"

# Job condition types and reasons (k8s.io/api/batch/v1)
SUCCESS_CRITERIA_MET, COMPLETE = "SuccessCriteriaMet", "Complete"
FAILURE_TARGET, FAILED = "FailureTarget", "Failed"
COMPLETIONS_REACHED, SUCCESS_POLICY = "CompletionsReached", "SuccessPolicy"
POD_FAILURE_POLICY, BACKOFF_LIMIT_EXCEEDED = "PodFailurePolicy", "BackoffLimitExceeded"
DEADLINE_EXCEEDED, MAX_FAILED_INDEXES_EXCEEDED = "DeadlineExceeded", "MaxFailedIndexesExceeded"
FAILED_INDEXES = "FailedIndexes"
STOPPED = "Stopped"  # not Kubernetes': the run was stopped from outside (run-local --timeout, a tuner's prune)

# An index's phase
PENDING, RUNNING, BACKOFF = "pending", "running", "backoff"
SUCCEEDED = "succeeded"
FAILED_INDEX = "failed"  # in the Job's failedIndexes (backoffLimitPerIndex exceeded, FailIndex)
ENDED = "ended"  # not succeeded, and not to be run again: its Job finished (or failed through it)


# ---------------------------------------------------------------------------- the spec


@dataclass(frozen=True)
class ExitCodes:
    """A rule's `onExitCodes`."""

    operator: str  # In | NotIn
    values: frozenset[int]
    container: str | None = None  # containerName; None: any container

    def matches(self, exit_code: int | None, container: str) -> bool:
        if exit_code is None or exit_code == 0 or (self.container is not None and self.container != container):
            return False
        if self.operator == "In":
            return exit_code in self.values
        if self.operator == "NotIn":
            return exit_code not in self.values
        return False


@dataclass(frozen=True)
class FailureRule:
    """One `podFailurePolicy` rule."""

    action: str  # FailJob | FailIndex | Ignore | Count
    exit_codes: ExitCodes | None = None
    pod_conditions: frozenset[str] = frozenset()  # condition types that match with status True

    @classmethod
    def from_manifest(cls, rule: dict[str, Any]) -> FailureRule:
        codes = rule.get("onExitCodes")
        return cls(
            rule["action"],
            ExitCodes(codes["operator"], frozenset(int(v) for v in codes["values"]), codes.get("containerName"))
            if codes
            else None,
            frozenset(c["type"] for c in rule.get("onPodConditions") or [] if c.get("status", "True") == "True"),
        )

    def matches(self, exit_code: int | None, conditions: frozenset[str], container: str) -> bool:
        if self.exit_codes is not None:
            return self.exit_codes.matches(exit_code, container)
        return bool(self.pod_conditions & conditions)


@dataclass(frozen=True)
class SuccessRule:
    """One `successPolicy` rule."""

    succeeded_indexes: frozenset[int] | None = None
    succeeded_count: int | None = None

    @classmethod
    def from_manifest(cls, rule: dict[str, Any], completions: int) -> SuccessRule:
        text = rule.get("succeededIndexes")
        count = rule.get("succeededCount")
        return cls(
            parse_indexes(text, completions) if text is not None else None, None if count is None else int(count)
        )

    def met(self, succeeded: set[int]) -> bool:
        if self.succeeded_indexes is not None:
            if not self.succeeded_indexes:  # unparsable: the controller skips the rule
                return False
            done = len(self.succeeded_indexes & succeeded)
            return done == len(self.succeeded_indexes) if self.succeeded_count is None else done >= self.succeeded_count
        return self.succeeded_count is not None and len(succeeded) >= self.succeeded_count


def parse_indexes(text: str, completions: int) -> frozenset[int]:
    """`succeededIndexes` ("0-2,5"), indexes below `completions` only."""
    out: set[int] = set()
    for part in text.split(","):
        first, _, last = part.strip().partition("-")
        try:
            out.update(range(int(first), int(last or first) + 1))
        except ValueError:
            return frozenset()
    return frozenset(i for i in out if 0 <= i < completions)


@dataclass(frozen=True)
class JobSpec:
    """The fields of an Indexed Job that decide what its controller does, and the chart's
    leader/stop semantics from its pod template's env."""

    name: str
    completions: int = 1
    parallelism: int | None = None  # None: completions
    backoff_limit: int | None = None  # None: Kubernetes' default (6, or MaxInt32 with backoffLimitPerIndex)
    backoff_limit_per_index: int | None = None
    max_failed_indexes: int | None = None
    pod_failure_policy: tuple[FailureRule, ...] = ()
    success_policy: tuple[SuccessRule, ...] = ()
    active_deadline_seconds: float | None = None
    container: str = "tensorflow"  # the container whose exit code the pod's exit is
    leader: str = ""  # TF_CLUSTER_LEADER_JOB: the Job the chart's launchers poll
    stops_with_leader: bool = False  # TF_CLUSTER_STOP_WITH_LEADER

    @classmethod
    def from_manifest(cls, doc: dict[str, Any], config_maps: Mapping[str, dict] | None = None) -> JobSpec:
        """`config_maps`: the rendered ConfigMaps' data by name (manifests.config_maps), where the
        chart's pods find the run's environment (`envFrom`), the leader's name among it."""
        spec = doc["spec"]
        if spec.get("completionMode") != "Indexed":
            raise ValueError(f"Job {doc['metadata']['name']}: only Indexed Jobs are run here (the chart's kind)")
        completions = int(spec.get("completions", 1))
        container = spec["template"]["spec"]["containers"][0]
        entries = manifests.env_entries(container, config_maps or {})
        env = {name: e["value"] for name, e in entries.items() if "value" in e}
        rules = (spec.get("podFailurePolicy") or {}).get("rules") or []
        success = (spec.get("successPolicy") or {}).get("rules") or []
        optional = {k: spec.get(k) for k in ("backoffLimit", "backoffLimitPerIndex", "maxFailedIndexes")}
        deadline = spec.get("activeDeadlineSeconds")
        return cls(
            name=doc["metadata"]["name"],
            completions=completions,
            parallelism=int(spec.get("parallelism", 1)),
            backoff_limit=_int_or_none(optional["backoffLimit"]),
            backoff_limit_per_index=_int_or_none(optional["backoffLimitPerIndex"]),
            max_failed_indexes=_int_or_none(optional["maxFailedIndexes"]),
            pod_failure_policy=tuple(FailureRule.from_manifest(r) for r in rules),
            success_policy=tuple(SuccessRule.from_manifest(r, completions) for r in success),
            active_deadline_seconds=None if deadline is None else float(deadline),
            container=container.get("name", ""),
            leader=env.get("TF_CLUSTER_LEADER_JOB", ""),
            stops_with_leader=env.get("TF_CLUSTER_STOP_WITH_LEADER") == "true",
        )

    @property
    def per_index(self) -> bool:
        return self.backoff_limit_per_index is not None

    @property
    def effective_backoff_limit(self) -> int:
        if self.backoff_limit is not None:
            return self.backoff_limit
        return MAX_INT32 if self.per_index else DEFAULT_BACKOFF_LIMIT

    @property
    def effective_parallelism(self) -> int:
        return self.completions if self.parallelism is None else self.parallelism

    def failure_action(self, exit_code: int | None, conditions: frozenset[str]) -> tuple[str, int | None]:
        """The action for a failed pod and the index of the rule that decided it (None: no rule matched)."""
        for number, rule in enumerate(self.pod_failure_policy):
            if rule.matches(exit_code, conditions, self.container):
                action = rule.action
                if action == FAIL_INDEX and not self.per_index:  # only valid with backoffLimitPerIndex
                    action = COUNT
                return action, number
        return COUNT, None


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


# ---------------------------------------------------------------------------- events in


@dataclass(frozen=True)
class Start:
    """The release is created: every Job starts (its status.startTime)."""

    at: float


@dataclass(frozen=True)
class PodExited:
    """The running pod of `job`'s `index` ended: its container's exit code (None: it has none,
    e.g. a pod marked Failed on a lost node) and the pod's conditions with status True."""

    job: str
    index: int
    exit_code: int | None
    at: float
    conditions: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Tick:
    """Time passed: backoffs and deadlines may have run out."""

    at: float


@dataclass(frozen=True)
class Stop:
    """Stop every unfinished Job from outside (run-local --timeout, a tuner's prune)."""

    at: float
    message: str


Event = Start | PodExited | Tick | Stop


# ---------------------------------------------------------------------------- decisions out


@dataclass(frozen=True)
class CreatePod:
    """Start the index's pod: its first (`attempt` 0) or a replacement."""

    job: str
    index: int
    attempt: int


@dataclass(frozen=True)
class Backoff:
    """The index's pod failed and will be replaced, not before `until`."""

    job: str
    index: int
    delay: float
    until: float


@dataclass(frozen=True)
class PodFailure:
    """How a failed pod was counted: the action and the index's counts after it
    (`job-index-failure-count`, `job-index-ignored-failure-count`)."""

    job: str
    index: int
    exit_code: int | None
    action: str
    failures: int
    ignored: int


@dataclass(frozen=True)
class IndexSucceeded:
    job: str
    index: int


@dataclass(frozen=True)
class IndexFailed:
    """The index is in the Job's failedIndexes: it will not run again."""

    job: str
    index: int
    message: str


@dataclass(frozen=True)
class DeletePods:
    """The Job is finishing: delete its active pods (SIGTERM, then the grace period)."""

    job: str
    indexes: tuple[int, ...]


@dataclass(frozen=True)
class Condition:
    """A Job condition set True: SuccessCriteriaMet / FailureTarget while the Job's pods are
    deleted, then Complete / Failed."""

    job: str
    type: str
    reason: str
    message: str = ""

    @property
    def outcome(self) -> str:
        """What the chart's launchers read it as."""
        return COMPLETE if self.type in (SUCCESS_CRITERIA_MET, COMPLETE) else FAILED

    @property
    def terminal(self) -> bool:
        return self.type in (COMPLETE, FAILED)


@dataclass(frozen=True)
class LeaderFinished:
    """The leading Job is Complete or Failed as its pollers read it: the launchers of the
    `stopping` Jobs now stop their tasks (exit 0 when Complete, 3 when Failed)."""

    job: str
    outcome: str  # Complete | Failed
    stopping: tuple[str, ...]


Decision = CreatePod | Backoff | PodFailure | IndexSucceeded | IndexFailed | DeletePods | Condition | LeaderFinished


# ---------------------------------------------------------------------------- one Job


@dataclass
class Index:
    """One completion index of a Job."""

    number: int
    phase: str = PENDING
    failures: int = 0  # failures counted against backoffLimitPerIndex
    ignored: int = 0  # failures an Ignore rule matched
    pods: int = 0  # pods created for it
    not_before: float = 0.0  # backoff: no replacement before then
    exit_codes: list[int | None] = field(default_factory=list)


class JobController:
    """One Indexed Job, as the Job controller runs it. Every input returns the decisions it led to."""

    def __init__(
        self, spec: JobSpec, *, backoff: float = DEFAULT_BACKOFF_SECONDS, max_backoff: float = MAX_BACKOFF_SECONDS
    ) -> None:
        self.spec = spec
        self.backoff, self.max_backoff = backoff, max_backoff
        self.indexes = [Index(i) for i in range(spec.completions)]
        self.started_at: float | None = None
        self.failed = 0  # status.failed: failed pods not ignored
        self.finishing: Condition | None = None  # SuccessCriteriaMet | FailureTarget
        self.condition: Condition | None = None  # Complete | Failed
        self._fail_job = ""  # the message of a FailJob match
        self._stop = ""  # the message of a Stop from outside
        self._failures_since_success = 0  # the Job-wide backoff record (without backoffLimitPerIndex)
        self._wide_not_before = 0.0

    # ------------------------------------------------------------ views

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def finished(self) -> bool:
        return self.condition is not None

    @property
    def outcome(self) -> str:
        """Complete or Failed as the chart's launchers read the Job; empty while it runs."""
        current = self.condition or self.finishing
        return current.outcome if current else ""

    def active(self) -> list[int]:
        return [ix.number for ix in self.indexes if ix.phase == RUNNING]

    def succeeded_indexes(self) -> set[int]:
        return {ix.number for ix in self.indexes if ix.phase == SUCCEEDED}

    def failed_indexes(self) -> set[int]:
        return {ix.number for ix in self.indexes if ix.phase == FAILED_INDEX}

    def next_wakeup(self) -> float | None:
        """The next time a Tick can change something (a backoff or the deadline running out)."""
        if self.finishing or self.started_at is None:
            return None
        times = [max(ix.not_before, self._wide_not_before) for ix in self.indexes if ix.phase == BACKOFF]
        if self.spec.active_deadline_seconds is not None:
            times.append(self.started_at + self.spec.active_deadline_seconds)
        return min(times, default=None)

    # ------------------------------------------------------------ inputs

    def start(self, now: float) -> list[Decision]:
        if self.started_at is not None:
            return []
        self.started_at = now
        return self._sync(now)

    def tick(self, now: float) -> list[Decision]:
        return self._sync(now) if self.started_at is not None else []

    def stop(self, now: float, message: str) -> list[Decision]:
        if self.finishing or self.condition:
            return []
        self._stop = message
        return self._sync(now)

    def pod_exited(
        self, index: int, exit_code: int | None, now: float, conditions: Iterable[str] = ()
    ) -> list[Decision]:
        ix = self.indexes[index]
        if ix.phase != RUNNING:
            raise ValueError(f"Job {self.name} index {index} has no running pod ({ix.phase})")
        ix.exit_codes.append(exit_code)
        out: list[Decision] = []
        if exit_code == 0:
            ix.phase = SUCCEEDED
            self._failures_since_success = 0
            out.append(IndexSucceeded(self.name, index))
        elif self.finishing:  # deleted with its Job: not replaced, not an index failure
            ix.phase = ENDED
        else:
            out += self._pod_failed(ix, exit_code, now, frozenset(conditions))
        return out + self._sync(now)

    # ------------------------------------------------------------ the rules

    def _pod_failed(self, ix: Index, exit_code: int | None, now: float, conditions: frozenset[str]) -> list[Decision]:
        action, rule = self.spec.failure_action(exit_code, conditions)
        if action == IGNORE:
            ix.ignored += 1
        else:
            self.failed += 1
        if action == COUNT and self.spec.per_index:
            ix.failures += 1
        out: list[Decision] = [PodFailure(self.name, ix.number, exit_code, action, ix.failures, ix.ignored)]
        limit = self.spec.backoff_limit_per_index
        if action == FAIL_JOB:
            ix.phase = ENDED
            self._fail_job = self._fail_job or (
                f"index {ix.number} exited {exit_code}, a non-retryable exit code "
                f"(podFailurePolicy rule {rule}: FailJob)"
            )
        elif action == FAIL_INDEX or (action == COUNT and limit is not None and ix.failures > limit):
            ix.phase = FAILED_INDEX
            why = (
                f"rule {rule}: FailIndex"
                if action == FAIL_INDEX
                else f"failed more than backoffLimitPerIndex={limit} times"
            )
            out.append(IndexFailed(self.name, ix.number, f"index {ix.number} {why}"))
        else:
            out.append(self._back_off(ix, now))
        return out

    def _back_off(self, ix: Index, now: float) -> Backoff:
        if self.spec.per_index:  # the index's failures, counted and ignored (getRemainingTimePerIndex)
            count = ix.failures + ix.ignored
        else:  # the Job's failed pods since its last success (backoffRecord)
            self._failures_since_success += 1
            count = self._failures_since_success
        delay = min(self.backoff * 2 ** (count - 1), self.max_backoff) if count else 0.0
        ix.phase, ix.not_before = BACKOFF, now + delay
        if not self.spec.per_index:
            self._wide_not_before = now + delay
        return Backoff(self.name, ix.number, delay, now + delay)

    def _finishing_condition(self, now: float) -> Condition | None:
        """What finishes the Job now, in syncJob's order; None: it runs on."""
        spec = self.spec
        if self._stop:
            return Condition(self.name, FAILURE_TARGET, STOPPED, self._stop)
        if self._fail_job:
            return Condition(self.name, FAILURE_TARGET, POD_FAILURE_POLICY, self._fail_job)
        if self.failed > spec.effective_backoff_limit:
            return Condition(
                self.name,
                FAILURE_TARGET,
                BACKOFF_LIMIT_EXCEEDED,
                f"more than backoffLimit={spec.effective_backoff_limit} failures",
            )
        deadline = spec.active_deadline_seconds
        if deadline is not None and self.started_at is not None and now - self.started_at >= deadline:
            return Condition(
                self.name, FAILURE_TARGET, DEADLINE_EXCEEDED, f"active longer than activeDeadlineSeconds={deadline:g}"
            )
        return self._index_condition() or self._success_policy_condition()

    def _index_condition(self) -> Condition | None:
        if not self.spec.per_index:
            return None
        failed = sorted(self.failed_indexes())
        listed = ", ".join(map(str, failed))
        limit = self.spec.max_failed_indexes
        if limit is not None and len(failed) > limit:
            return Condition(
                self.name,
                FAILURE_TARGET,
                MAX_FAILED_INDEXES_EXCEEDED,
                f"failed indexes {listed}: more than maxFailedIndexes={limit}",
            )
        if failed and len(failed) + len(self.succeeded_indexes()) >= self.spec.completions:
            return Condition(
                self.name,
                FAILURE_TARGET,
                FAILED_INDEXES,
                f"index(es) {listed} failed more than backoffLimitPerIndex={self.spec.backoff_limit_per_index} times",
            )
        return None

    def _success_policy_condition(self) -> Condition | None:
        succeeded = self.succeeded_indexes()
        for number, rule in enumerate(self.spec.success_policy):
            if succeeded and rule.met(succeeded):
                return Condition(self.name, SUCCESS_CRITERIA_MET, SUCCESS_POLICY, f"successPolicy rule {number} met")
        return None

    def _sync(self, now: float) -> list[Decision]:
        """syncJob: finish the Job, or create the pods that are due; take the terminal
        condition once a finishing Job has no active pod left."""
        if self.condition:
            return []
        out: list[Decision] = []
        if self.finishing is None:
            self.finishing = self._finishing_condition(now)
            if self.finishing:
                out.append(self.finishing)
                out += self._end_the_rest()
        if self.finishing is None:
            out += self._create_due(now)
            if len(self.succeeded_indexes()) == self.spec.completions:
                self.finishing = Condition(self.name, SUCCESS_CRITERIA_MET, COMPLETIONS_REACHED)
                out.append(self.finishing)
        if self.finishing and not self.active():
            f = self.finishing
            self.condition = Condition(self.name, COMPLETE if f.outcome == COMPLETE else FAILED, f.reason, f.message)
            out.append(self.condition)
        return out

    def _end_the_rest(self) -> list[Decision]:
        for ix in self.indexes:
            if ix.phase in (PENDING, BACKOFF):
                ix.phase = ENDED
        active = self.active()
        return [DeletePods(self.name, tuple(active))] if active else []

    def _create_due(self, now: float) -> list[Decision]:
        out: list[Decision] = []
        room = self.spec.effective_parallelism - len(self.active())
        for ix in self.indexes:
            if room <= 0:
                break
            due = max(ix.not_before, self._wide_not_before) <= now
            if ix.phase == PENDING or (ix.phase == BACKOFF and due):
                out.append(CreatePod(self.name, ix.number, ix.pods))
                ix.phase, ix.pods = RUNNING, ix.pods + 1
                room -= 1
        return out


# ---------------------------------------------------------------------------- the release


class Release:
    """The release's Jobs, and the chart's rule that ties them: the servers stop with the leader."""

    def __init__(
        self,
        specs: Sequence[JobSpec],
        *,
        backoff: float = DEFAULT_BACKOFF_SECONDS,
        max_backoff: float = MAX_BACKOFF_SECONDS,
    ) -> None:
        self.jobs = {s.name: JobController(s, backoff=backoff, max_backoff=max_backoff) for s in specs}
        named = {s.leader for s in specs if s.leader}
        self.leader: str | None = next((n for n in self.jobs if n in named), None)
        self.leader_outcome = ""

    @property
    def finished(self) -> bool:
        return all(j.finished for j in self.jobs.values())

    @property
    def stopping(self) -> tuple[str, ...]:
        """The Jobs whose launchers stop their tasks once the leading Job finished."""
        return tuple(n for n, j in self.jobs.items() if j.spec.stops_with_leader)

    def next_wakeup(self) -> float | None:
        return min((t for j in self.jobs.values() if (t := j.next_wakeup()) is not None), default=None)

    def handle(self, event: Event) -> list[Decision]:
        """The one step: an event in, the decisions it leads to out."""
        out: list[Decision] = []
        if isinstance(event, PodExited):
            out = self.jobs[event.job].pod_exited(event.index, event.exit_code, event.at, event.conditions)
        elif isinstance(event, Start):
            out = [d for j in self.jobs.values() for d in j.start(event.at)]
        elif isinstance(event, Tick):
            out = [d for j in self.jobs.values() for d in j.tick(event.at)]
        elif isinstance(event, Stop):
            out = [d for j in self.jobs.values() for d in j.stop(event.at, event.message)]
        else:
            raise TypeError(f"not an event: {event!r}")
        return out + self._leader_news()

    def _leader_news(self) -> list[Decision]:
        if self.leader is None or self.leader_outcome:
            return []
        self.leader_outcome = self.jobs[self.leader].outcome
        return [LeaderFinished(self.leader, self.leader_outcome, self.stopping)] if self.leader_outcome else []
