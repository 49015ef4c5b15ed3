"""The Job controller's rules as run-local applies them (tf_cluster/localrun/jobs.py), on the cases
the real node shows: one test per row of docs/user-guide/lifecycle.md's tables (the launcher, exit
codes and retries, who stops when, restarts, faults) and of lost-nodes.md's, named after the row,
plus edge cases of the rules. No processes, no TensorFlow, no sleeps: this test plays the pods,
their launchers and the clock.

Rows not about Job rules, left to their tests on the node: lost-nodes.md's "spread over three
nodes" (placement) and "NetworkPolicy across nodes" (the network).
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tf_cluster import CHART, ROOT, manifests, roles
from tf_cluster.localrun.jobs import (
    BACKOFF_LIMIT_EXCEEDED,
    COMPLETE,
    COMPLETIONS_REACHED,
    COUNT,
    DEADLINE_EXCEEDED,
    DISRUPTION_TARGET,
    FAIL_INDEX,
    FAIL_JOB,
    FAILED,
    FAILED_INDEXES,
    FAILURE_TARGET,
    IGNORE,
    MAX_FAILED_INDEXES_EXCEEDED,
    POD_FAILURE_POLICY,
    STOPPED,
    SUCCESS_CRITERIA_MET,
    SUCCESS_POLICY,
    Backoff,
    Condition,
    CreatePod,
    DeletePods,
    IndexFailed,
    JobSpec,
    LeaderFinished,
    PodExited,
    PodFailure,
    Release,
    Start,
    Stop,
    SuccessRule,
    Tick,
    parse_indexes,
)

JOB_DEFAULTS = yaml.safe_load((CHART / "values.yaml").read_text())["job"]  # the chart's `job` values
SIGTERM_EXIT, SIGKILL_EXIT = 128 + 15, 128 + 9


def job_doc(
    role: str,
    replicas: int = 1,
    *,
    leader: str = "chief",
    stops: bool = False,
    backoff_limit_per_index: int | None = None,
    non_retryable: list[int] | None = None,
    max_failed_indexes: int | None = None,
    active_deadline_seconds: int | None = None,
    success_count: int | None = None,
    coordinator: bool = False,
) -> dict[str, Any]:
    """A Job as the chart renders it (templates/_job.tpl), named after its role; the chart's `job`
    defaults unless given."""
    per_index = JOB_DEFAULTS["backoffLimitPerIndex"] if backoff_limit_per_index is None else backoff_limit_per_index
    codes = JOB_DEFAULTS["nonRetryableExitCodes"] if non_retryable is None else non_retryable
    rules: list[dict[str, Any]] = [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    ]
    if coordinator:  # the ParameterServer chief's restart for a lost peer (launcher exit 6)
        rules.append(
            {"action": "Ignore", "onExitCodes": {"containerName": "tensorflow", "operator": "In", "values": [6]}}
        )
    if JOB_DEFAULTS["restartExitCodes"]:  # TensorFlow's PreemptionCheckpointHandler exits 42 after its save
        rules.append(
            {
                "action": "Ignore",
                "onExitCodes": {
                    "containerName": "tensorflow",
                    "operator": "In",
                    "values": JOB_DEFAULTS["restartExitCodes"],
                },
            }
        )
    if codes:
        rules.append(
            {"action": "FailJob", "onExitCodes": {"containerName": "tensorflow", "operator": "In", "values": codes}}
        )
    spec: dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": replicas,
        "parallelism": replicas,
        "backoffLimitPerIndex": per_index,
        "podReplacementPolicy": "Failed",
        "podFailurePolicy": {"rules": rules},
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "tensorflow",
                        "env": [
                            {"name": "TF_CLUSTER_LEADER_JOB", "value": leader},
                            {"name": "TF_CLUSTER_STOP_WITH_LEADER", "value": str(stops).lower()},
                        ],
                    }
                ],
            }
        },
    }
    if max_failed_indexes is not None:
        spec["maxFailedIndexes"] = max_failed_indexes
    if success_count is not None:
        spec["successPolicy"] = {"rules": [{"succeededCount": success_count}]}
    if active_deadline_seconds is not None:
        spec["activeDeadlineSeconds"] = active_deadline_seconds
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": role}, "spec": spec}


def release_docs(strategy: str, replicas: dict[str, int], **kw: Any) -> list[dict[str, Any]]:
    """The release's Jobs, leader and stopping roles from the chart's role table (files/roles.yaml)."""
    leader = next(r for r in roles.LEADERS if replicas.get(r))
    return [
        job_doc(
            r,
            n,
            leader=leader,
            stops=r != leader and strategy in roles.BY_NAME[r].stops_with_leader,
            coordinator=strategy == "parameterServer" and r == "chief",
            **kw,
        )
        for r, n in replicas.items()
    ]


class Sim:
    """A release's Jobs driven by this test: it plays the pods (their exits), the launchers (a
    stopping role exits 0 when the leading Job completed, 3 when it failed; a late replacement at
    once), the kubelet (a deleted pod's launcher exits 128+SIGTERM) and the clock."""

    def __init__(self, docs: list[dict[str, Any]], *, backoff: float = 10.0) -> None:
        self.release = Release([JobSpec.from_manifest(d) for d in docs], backoff=backoff)
        self.now = 0.0
        self.decisions: list[Any] = []
        self.running: set[tuple[str, int]] = set()
        self.never_placed: set[tuple[str, int]] = set()  # pods that stay Pending (no launcher runs)
        self.run(Start(self.now))

    # ------------------------------------------------------------ inputs

    def run(self, event: Any) -> list[Any]:
        """Handle the event and everything the pods and launchers do in reply; the decisions."""
        got: list[Any] = []
        queue = [event]
        while queue:
            out = self.release.handle(queue.pop(0))
            got += out
            queue += self._reactions(out)
        self.decisions += got
        return got

    def exit(self, job: str, index: int, code: int | None, *conditions: str) -> list[Any]:
        self.running.discard((job, index))
        return self.run(PodExited(job, index, code, self.now, frozenset(conditions)))

    def evict(self, job: str, index: int, code: int | None = SIGTERM_EXIT) -> list[Any]:
        """Evicted (a drain, preemption, the taint manager on a lost node): DisruptionTarget."""
        return self.exit(job, index, code, DISRUPTION_TARGET)

    def complete(self, *jobs: str) -> None:
        """Every running pod of these Jobs exits 0."""
        for job, index in sorted(self.running):
            if job in jobs:
                self.exit(job, index, 0)

    def wait(self, seconds: float) -> list[Any]:
        """Let time pass, ticking at each moment something is due; the decisions."""
        end, got = self.now + seconds, []
        while (due := self.release.next_wakeup()) is not None and due <= end:
            self.now = max(self.now, due)
            out = self.run(Tick(self.now))
            got += out
            if not out:
                break
        self.now = end
        return got + self.run(Tick(self.now))

    def _reactions(self, decisions: list[Any]) -> list[PodExited]:
        out = []

        def ends(job: str, index: int, code: int | None) -> None:
            if (job, index) in self.running:
                self.running.discard((job, index))
                out.append(PodExited(job, index, code, self.now))

        for d in decisions:
            if isinstance(d, CreatePod):
                self.running.add((d.job, d.index))
                late = self.release.leader_outcome and d.job in self.release.stopping
                if late and (d.job, d.index) not in self.never_placed:
                    ends(d.job, d.index, 0 if self.release.leader_outcome == COMPLETE else 3)
            elif isinstance(d, DeletePods):
                for index in d.indexes:
                    ends(d.job, index, None if (d.job, index) in self.never_placed else SIGTERM_EXIT)
            elif isinstance(d, LeaderFinished):
                for job, index in sorted(self.running):
                    if job in d.stopping and (job, index) not in self.never_placed:
                        ends(job, index, 0 if d.outcome == COMPLETE else 3)
        return out

    # ------------------------------------------------------------ what happened

    def condition(self, job: str) -> tuple[str, str] | None:
        c = self.release.jobs[job].condition
        return (c.type, c.reason) if c else None

    def conditions(self) -> dict[str, tuple[str, str] | None]:
        return {name: self.condition(name) for name in self.release.jobs}

    def index(self, job: str, index: int = 0):
        return self.release.jobs[job].indexes[index]

    def of(self, kind: type, job: str | None = None) -> list[Any]:
        return [d for d in self.decisions if isinstance(d, kind) and (job is None or d.job == job)]

    def replacements(self, job: str) -> list[CreatePod]:
        return [d for d in self.of(CreatePod, job) if d.attempt > 0]


def mwms(workers: int = 2, chief: bool = True, **kw: Any) -> Sim:
    return Sim(release_docs("multiWorkerMirrored", {"chief": int(chief), "worker": workers}, **kw))


def parameter_server(evaluator: bool = False, **kw: Any) -> Sim:
    replicas = {"chief": 1, "worker": 2, "ps": 1} | ({"evaluator": 1} if evaluator else {})
    return Sim(release_docs("parameterServer", replicas, **kw))


def finish_ps_run(sim: Sim) -> None:
    """The coordinator completes; the servers' launchers stop them."""
    sim.complete("chief")
    assert all(c == (COMPLETE, COMPLETIONS_REACHED) for c in sim.conditions().values()), sim.conditions()


# ============================================================ lifecycle.md: The launcher


def test_launcher_peers_exit_4_after_the_peer_timeout_fails_the_job_at_once():
    sim = mwms(workers=2, chief=False)
    sim.exit("worker", 1, 4)
    target = sim.of(Condition, "worker")[0]
    assert (target.type, target.reason) == (FAILURE_TARGET, POD_FAILURE_POLICY)
    assert target.message == "index 1 exited 4, a non-retryable exit code (podFailurePolicy rule 2: FailJob)"
    assert sim.of(DeletePods, "worker") == [DeletePods("worker", (0,))]  # the other index is deleted
    assert sim.condition("worker") == (FAILED, POD_FAILURE_POLICY)  # once it is gone
    assert sim.replacements("worker") == [] and sim.index("worker", 1).failures == 0


def test_launcher_signals_a_task_stopped_by_sigterm_exits_128_plus_signal_and_its_index_is_retried():
    sim = mwms(workers=1, chief=False)
    sim.exit("worker", 0, SIGTERM_EXIT)
    (failure,) = sim.of(PodFailure, "worker")
    assert (failure.action, failure.failures) == (COUNT, 1)
    assert sim.wait(10) == [CreatePod("worker", 0, 1)]
    sim.complete("worker")
    assert sim.condition("worker") == (COMPLETE, COMPLETIONS_REACHED)


def test_launcher_stop_the_servers_exit_0_when_the_leading_job_completes():
    sim = parameter_server()
    sim.complete("chief")
    assert sim.of(LeaderFinished) == [LeaderFinished("chief", COMPLETE, ("worker", "ps"))]
    assert [i.exit_codes for job in ("worker", "ps") for i in sim.release.jobs[job].indexes] == [[0], [0], [0]]
    assert sim.conditions() == {job: (COMPLETE, COMPLETIONS_REACHED) for job in ("chief", "worker", "ps")}


def test_launcher_stop_the_servers_exit_3_when_the_leading_job_failed():
    sim = parameter_server(backoff_limit_per_index=0)
    sim.exit("chief", 0, 1)
    assert sim.condition("chief") == (FAILED, FAILED_INDEXES)
    assert sim.of(LeaderFinished) == [LeaderFinished("chief", FAILED, ("worker", "ps"))]
    for job in ("worker", "ps"):  # exit 3 is non-retryable: their Jobs fail at once
        assert sim.condition(job) == (FAILED, POD_FAILURE_POLICY)
        assert sim.release.jobs[job].indexes[0].exit_codes == [3]


def test_launcher_lost_nodes_a_fenced_pod_is_replaced_and_the_coordinator_exit_6_is_retried_uncounted():
    sim = parameter_server()
    # the worker's node is lost: evicted by the taint manager (DisruptionTarget), then fenced
    # (marked Failed, reason NodeLost): no container exit code reached the API
    sim.evict("worker", 1, code=None)
    assert sim.of(PodFailure, "worker")[-1].action == IGNORE
    sim.exit("chief", 0, 6)  # the coordinator restarts to reconnect to the replacement
    assert sim.of(PodFailure, "chief")[-1].action == IGNORE  # the chief Job's rule for exit 6 (issue 43)
    assert sim.wait(10) == [CreatePod("chief", 0, 1), CreatePod("worker", 1, 1)]
    assert (sim.index("worker", 1).failures, sim.index("worker", 1).ignored) == (0, 1)
    assert (sim.index("chief").failures, sim.index("chief").ignored) == (0, 1)
    finish_ps_run(sim)


@pytest.mark.parametrize("code", [1, 5, SIGKILL_EXIT], ids=["the command's own 1", "5 launcher misconfigured", "137"])
def test_launcher_otherwise_the_commands_own_exit_code_is_retried(code):
    sim = mwms(workers=1, chief=False)
    sim.exit("worker", 0, code)
    assert [d.action for d in sim.of(PodFailure)] == [COUNT] and sim.of(Backoff)[0].delay == 10


# ============================================================ lifecycle.md: Exit codes and retries


@pytest.mark.parametrize("code", JOB_DEFAULTS["nonRetryableExitCodes"])
def test_exit_codes_2_3_and_4_are_non_retryable_by_default(code):
    assert JOB_DEFAULTS["nonRetryableExitCodes"] == [2, 3, 4]
    sim = mwms(workers=1, chief=False)
    sim.exit("worker", 0, code)
    assert [d.action for d in sim.of(PodFailure)] == [FAIL_JOB]
    assert sim.condition("worker") == (FAILED, POD_FAILURE_POLICY) and sim.replacements("worker") == []


def test_exit_codes_an_evicted_or_preempted_pod_is_retried_without_counting():
    sim = mwms(workers=1, chief=False, backoff_limit_per_index=0)
    for _ in range(3):  # not even a limit of 0 is used up
        sim.evict("worker", 0)
        sim.wait(60)
    assert (sim.index("worker").failures, sim.index("worker").ignored) == (0, 3)
    assert sim.release.jobs["worker"].failed == 0 and sim.condition("worker") is None


def test_exit_codes_42_after_a_preemption_save_restarts_every_task_without_counting():
    """A worker preempted: TensorFlow's PreemptionCheckpointHandler makes every MultiWorkerMirrored
    task save at the same step and exit 42; `job.restartExitCodes` (default [42]) ignores it."""
    assert JOB_DEFAULTS["restartExitCodes"] == [42]
    sim = mwms(workers=2, chief=False, backoff_limit_per_index=0)
    sim.evict("worker", 1, 42)  # the preempted one saves too, and exits 42 within its grace
    sim.exit("worker", 0, 42)
    sim.wait(60)
    assert [d.action for d in sim.of(PodFailure)] == [IGNORE, IGNORE]
    assert sim.release.jobs["worker"].failed == 0 and sim.condition("worker") is None
    assert sorted(d.index for d in sim.replacements("worker")) == [0, 1]


# ============================================================ lifecycle.md: Who stops when

WHO_STOPS_WHEN = [  # strategy, roles present, the table's leading Job, the table's stopping roles
    pytest.param(
        "multiWorkerMirrored",
        {"chief": 1, "worker": 2, "evaluator": 1},
        "chief",
        {"evaluator"},
        id="multiWorkerMirrored with chief",
    ),
    pytest.param(
        "multiWorkerMirrored",
        {"worker": 2, "evaluator": 1},
        "worker",
        {"evaluator"},
        id="multiWorkerMirrored, workers only",
    ),
    pytest.param(
        "parameterServer",
        {"chief": 1, "worker": 2, "ps": 1, "evaluator": 1},
        "chief",
        {"ps", "worker", "evaluator"},
        id="parameterServer",
    ),
    pytest.param(
        "custom", {"chief": 1, "worker": 1, "ps": 1, "evaluator": 1}, "chief", {"ps", "evaluator"}, id="custom"
    ),
    pytest.param(
        "custom", {"worker": 2, "ps": 1, "evaluator": 1}, "worker", {"ps", "evaluator"}, id="custom, no chief"
    ),
]


@pytest.mark.parametrize("strategy,replicas,leader,stopping", WHO_STOPS_WHEN)
def test_who_stops_when(strategy, replicas, leader, stopping):
    sim = Sim(release_docs(strategy, replicas))
    assert sim.release.leader == leader and set(sim.release.stopping) == stopping
    others = set(replicas) - stopping - {leader}
    for index in range(replicas[leader]):  # the leading Job is Complete when every index succeeded
        assert sim.of(LeaderFinished) == []
        sim.exit(leader, index, 0)
    assert sim.of(LeaderFinished) == [LeaderFinished(leader, COMPLETE, tuple(r for r in replicas if r in stopping))]
    for role in stopping:  # stopped by their launchers
        assert sim.condition(role) == (COMPLETE, COMPLETIONS_REACHED)
    for role in others:  # these end by themselves (MultiWorkerMirrored's workers train with the chief)
        assert sim.condition(role) is None
        sim.complete(role)
    assert sim.release.finished


# ============================================================ lifecycle.md: Restarts


def test_restarts_back_off_10_20_40_s_up_to_backoff_limit_per_index_then_the_index_fails():
    sim = mwms(workers=1, chief=False)  # backoffLimitPerIndex 3 (the chart's default)
    assert JOB_DEFAULTS["backoffLimitPerIndex"] == 3
    for delay in (10, 20, 40):
        sim.exit("worker", 0, 1)
        assert sim.of(Backoff)[-1].delay == delay
        assert sim.wait(delay - 1) == []  # not before its backoff
        assert sim.wait(1) == [CreatePod("worker", 0, sim.index("worker").pods - 1)]
    sim.exit("worker", 0, 1)  # the 4th failure: more than 3
    assert sim.of(IndexFailed) == [IndexFailed("worker", 0, "index 0 failed more than backoffLimitPerIndex=3 times")]
    assert sim.condition("worker") == (FAILED, FAILED_INDEXES)


def test_restarts_a_failed_index_is_replaced_only_after_its_old_pod_is_gone():
    """podReplacementPolicy: Failed: two pods of one index would make TF fail ("Duplicate task registration")."""
    sim = mwms(workers=2, chief=False, backoff_limit_per_index=3)
    assert sim.wait(3600) == []  # running pods: nothing to replace, however long
    sim.exit("worker", 0, 1)
    assert [d.index for d in sim.wait(10) if isinstance(d, CreatePod)] == [0]


def test_restarts_under_mwms_a_dead_task_aborts_the_others_and_all_are_replaced():
    sim = mwms(workers=3, chief=False)
    sim.exit("worker", 2, SIGKILL_EXIT)
    sim.exit("worker", 0, 1)  # their collectives fail
    sim.exit("worker", 1, 1)
    assert sorted(d.index for d in sim.wait(10) if isinstance(d, CreatePod)) == [0, 1, 2]
    sim.complete("worker")
    assert sim.condition("worker") == (COMPLETE, COMPLETIONS_REACHED)


# ============================================================ lifecycle.md: Faults


def test_fault_ps_killed_the_ps_job_replaces_it_and_the_chief_fails_and_is_started_again():
    sim = parameter_server()
    sim.exit("ps", 0, SIGKILL_EXIT)
    sim.exit("chief", 0, 1)  # it loses its variables
    sim.wait(10)
    assert [(d.job, d.index) for d in sim.replacements("ps") + sim.replacements("chief")] == [("ps", 0), ("chief", 0)]
    assert (sim.index("chief").failures, sim.index("ps").failures) == (1, 1)  # "1 failure each ... of 3"
    assert [sim.index("worker", i).failures for i in (0, 1)] == [0, 0]  # the workers serve on
    finish_ps_run(sim)


def test_fault_chief_killed_parameter_server_the_others_keep_serving_and_still_stop():
    sim = parameter_server(evaluator=True)
    sim.exit("chief", 0, SIGKILL_EXIT)
    assert sim.wait(10) == [CreatePod("chief", 0, 1)]
    assert sim.index("chief").failures == 1
    assert all(
        i.failures == 0 and i.pods == 1 for j in ("worker", "ps", "evaluator") for i in sim.release.jobs[j].indexes
    )
    finish_ps_run(sim)  # ps, workers and evaluator stop when the chief's Job is Complete


def test_fault_chief_killed_multi_worker_mirrored_the_worker_exits_too_and_both_are_replaced():
    sim = mwms(workers=1)
    sim.exit("chief", 0, SIGKILL_EXIT)
    sim.exit("worker", 0, 1)
    assert sorted((d.job, d.attempt) for d in sim.wait(10) if isinstance(d, CreatePod)) == [("chief", 1), ("worker", 1)]
    assert (sim.index("chief").failures, sim.index("worker").failures) == (1, 1)
    sim.complete("chief", "worker")
    assert sim.conditions() == {"chief": (COMPLETE, COMPLETIONS_REACHED), "worker": (COMPLETE, COMPLETIONS_REACHED)}


def test_fault_pod_evicted_replaced_without_using_the_backoff_budget():
    sim = parameter_server()
    sim.evict("worker", 1)  # the Eviction API (a drain): DisruptionTarget; its launcher exits on SIGTERM
    assert sim.wait(10) == [CreatePod("worker", 1, 1)]  # "replacement running 10 s later"
    w = sim.index("worker", 1)
    # job-index-failure-count 0, job-index-ignored-failure-count 1, Job failed 0
    assert (w.failures, w.ignored, sim.release.jobs["worker"].failed) == (0, 1, 0)
    finish_ps_run(sim)


def test_fault_kube_apiserver_down_60s_nothing_stops_or_restarts_and_the_jobs_complete():
    sim = parameter_server()
    # No pod ends while the API is down (TF talks to its peers directly): nothing to decide.
    assert sim.wait(83) == []
    finish_ps_run(sim)
    assert sum(len(sim.replacements(j)) for j in sim.release.jobs) == 0


def test_fault_kubelet_restarted_the_same_pods_run_on_with_no_restart():
    sim = mwms(workers=1)
    assert sim.wait(13) == []  # containers run on; the new kubelet adopts them: no pod ended
    sim.complete("chief", "worker")
    assert sim.replacements("chief") == sim.replacements("worker") == []
    assert sim.release.finished


def test_fault_over_the_memory_limit_oomkilled_is_retried_per_backoff_limit_per_index_then_failed_indexes():
    sim = mwms(workers=1, chief=False, backoff_limit_per_index=1)
    sim.exit("worker", 0, SIGKILL_EXIT)  # OOMKilled
    assert sim.wait(10) == [CreatePod("worker", 0, 1)]
    sim.exit("worker", 0, SIGKILL_EXIT)  # killed twice with backoffLimitPerIndex 1
    assert sim.condition("worker") == (FAILED, FAILED_INDEXES)
    assert sim.index("worker").exit_codes == [137, 137] and sim.replacements("worker") == [CreatePod("worker", 0, 1)]


def test_fault_a_server_replaced_after_the_gang_finished_ends_with_the_run_by_success_policy():
    """Where a gang is on (1.33+), the server roles' Jobs have `successPolicy: succeededCount 1`."""

    def run(success_count: int | None) -> Sim:
        docs = release_docs("parameterServer", {"chief": 1, "worker": 1, "ps": 2}, success_count=None)
        docs[2] = job_doc("ps", 2, stops=True, success_count=success_count)
        sim = Sim(docs)
        sim.never_placed.add(("ps", 1))  # its gang cannot form again: the replacement stays Pending
        sim.evict("ps", 1)  # a late eviction
        sim.wait(10)
        sim.complete("chief")  # ps-0 and the worker are stopped by their launchers
        return sim

    sim = run(success_count=1)
    assert sim.release.jobs["ps"].finishing == Condition(
        "ps", SUCCESS_CRITERIA_MET, SUCCESS_POLICY, "successPolicy rule 0 met"
    )
    assert sim.of(DeletePods, "ps") == [DeletePods("ps", (1,))]  # the rest removed
    assert sim.condition("ps") == (COMPLETE, SUCCESS_POLICY) and sim.release.finished
    hung = run(success_count=None)  # before: the run hung (the replacement pending 15 min)
    assert hung.condition("ps") is None and hung.wait(15 * 60) == []


# ============================================================ lost-nodes.md: Shown on three nodes


@pytest.mark.parametrize("how", ["kill", "partition"])
def test_lost_node_the_others_fail_and_restart_the_lost_worker_is_fenced_and_replaced(how):
    """Killed (every process SIGKILLed, its link cut) or cut off: the controller sees the same."""
    sim = mwms(workers=3, chief=False)
    sim.exit("worker", 0, 1)  # the other workers' collectives fail
    sim.exit("worker", 1, 1)
    sim.wait(60)
    sim.evict("worker", 2, code=None)  # evicted (taint manager: DisruptionTarget), then fenced: NodeLost
    assert sim.wait(10)[-1] == CreatePod("worker", 2, 1)
    assert [sim.index("worker", i).failures for i in range(3)] == [1, 1, 0]  # "2 failures counted of 3"
    assert sim.index("worker", 2).ignored == 1
    sim.complete("worker")
    assert sim.condition("worker") == (COMPLETE, COMPLETIONS_REACHED)


def test_lost_node_drained_its_task_moves_without_counting_failures():
    sim = mwms(workers=3, chief=False)
    sim.evict("worker", 2)  # kubectl drain: the Eviction API
    sim.exit("worker", 0, 1)  # the two other workers' collectives failed: 1 failure each
    sim.exit("worker", 1, 1)
    sim.wait(10)
    assert (sim.index("worker", 2).failures, sim.index("worker", 2).ignored) == (0, 1)
    assert [sim.index("worker", i).failures for i in (0, 1)] == [1, 1]
    sim.complete("worker")
    assert sim.condition("worker") == (COMPLETE, COMPLETIONS_REACHED)


def test_lost_node_a_parameter_server_worker_is_fenced_and_the_coordinator_reconnects():
    sim = parameter_server()
    sim.evict("worker", 1, code=None)  # fenced
    sim.exit("chief", 0, 6)  # restarts when a peer is fenced: ignored, no retry spent (issue 43)
    sim.wait(10)
    assert (sim.index("chief").failures, sim.index("chief").ignored) == (0, 1)
    assert (sim.index("worker", 1).failures, sim.index("worker", 1).ignored) == (0, 1)
    finish_ps_run(sim)


# ============================================================ the rules' edges


def test_the_specs_are_read_from_the_charts_render():
    text = (ROOT / "tests" / "golden" / "renders" / "everything.yaml").read_text()
    rendered = [d for d in yaml.safe_load_all(text) if d]
    maps = manifests.config_maps(rendered)  # the run's environment (envFrom), the leader's name in it
    docs = [d for d in rendered if d.get("kind") == "Job"]
    specs = {s.name.split("-")[-2]: s for s in (JobSpec.from_manifest(d, maps) for d in docs)}
    chief = specs["chief"]
    assert (chief.completions, chief.backoff_limit_per_index, chief.max_failed_indexes) == (1, 2, 1)
    assert [r.action for r in chief.pod_failure_policy] == [IGNORE, IGNORE, IGNORE, FAIL_JOB]
    assert chief.pod_failure_policy[0].pod_conditions == {DISRUPTION_TARGET}
    assert chief.failure_action(6, frozenset()) == (IGNORE, 1)  # the coordinator's restart for a lost peer
    assert chief.failure_action(75, frozenset()) == (IGNORE, 2)  # the case's restartExitCodes [42, 75]
    assert chief.failure_action(43, frozenset()) == (FAIL_JOB, 3)
    assert chief.container == "tensorflow" and chief.effective_backoff_limit == 2**31 - 1
    assert {n for n, s in specs.items() if s.stops_with_leader} == {"worker", "ps", "evaluator"}  # parameterServer
    assert {s.leader for s in specs.values()} == {chief.name}


def test_a_pod_failure_is_matched_by_the_first_rule_that_matches():
    sim = mwms(workers=1, chief=False)
    sim.exit("worker", 0, 3, DISRUPTION_TARGET)  # evicted while exiting 3: the Ignore rule comes first
    assert sim.of(PodFailure)[-1].action == IGNORE and sim.condition("worker") is None


def test_exit_code_rules_match_only_their_container_and_only_a_real_exit_code():
    doc = job_doc("worker")
    doc["spec"]["podFailurePolicy"]["rules"][-1]["onExitCodes"]["containerName"] = "sidecar"
    spec = JobSpec.from_manifest(doc)
    assert spec.failure_action(2, frozenset()) == (COUNT, None)
    assert JobSpec.from_manifest(job_doc("worker")).failure_action(None, frozenset()) == (COUNT, None)


def test_not_in_fail_index_and_count_rules():
    doc = job_doc("worker", 2, backoff_limit_per_index=5)
    doc["spec"]["podFailurePolicy"]["rules"] = [
        {"action": "Count", "onExitCodes": {"operator": "In", "values": [7]}},
        {"action": "FailIndex", "onExitCodes": {"operator": "NotIn", "values": [1, 7]}},
    ]
    sim = Sim([doc])
    sim.exit("worker", 0, 7)
    sim.exit("worker", 1, 9)  # not 1 or 7: that index fails at once
    assert [d.action for d in sim.of(PodFailure)] == [COUNT, FAIL_INDEX]
    assert sim.release.jobs["worker"].failed_indexes() == {1}
    assert sim.condition("worker") is None  # index 0 may still succeed
    sim.wait(10)
    sim.exit("worker", 0, 0)
    assert sim.condition("worker") == (FAILED, FAILED_INDEXES)


def test_failed_indexes_waits_for_every_index_to_end():
    sim = mwms(workers=2, chief=False, backoff_limit_per_index=0)
    sim.exit("worker", 0, 1)
    assert sim.condition("worker") is None and sim.of(DeletePods) == []  # worker-1 runs on
    sim.exit("worker", 1, 0)
    assert sim.condition("worker") == (FAILED, FAILED_INDEXES)


def test_more_failed_indexes_than_max_failed_indexes_fails_the_job_while_others_run():
    sim = mwms(workers=3, chief=False, backoff_limit_per_index=0, max_failed_indexes=1)
    sim.exit("worker", 0, 1)
    assert sim.condition("worker") is None
    sim.exit("worker", 1, 1)
    assert sim.of(Condition, "worker")[0].reason == MAX_FAILED_INDEXES_EXCEEDED
    assert sim.of(DeletePods) == [DeletePods("worker", (2,))]
    assert sim.condition("worker") == (FAILED, MAX_FAILED_INDEXES_EXCEEDED)


def test_active_deadline_seconds_fails_the_job_and_deletes_its_pods():
    sim = mwms(workers=2, chief=False, active_deadline_seconds=100)
    sim.exit("worker", 0, 1)
    got = sim.wait(100)  # the deadline counts from the Job's start: >= fails it
    assert got[0] == CreatePod("worker", 0, 1)
    assert Condition("worker", FAILURE_TARGET, DEADLINE_EXCEEDED, "active longer than activeDeadlineSeconds=100") in got
    assert sim.condition("worker") == (FAILED, DEADLINE_EXCEEDED) and sim.now == 100


def test_a_fail_job_match_comes_before_the_deadline_in_the_same_sync():
    sim = mwms(workers=1, chief=False, active_deadline_seconds=100)
    sim.now = 100
    sim.exit("worker", 0, 2)
    assert sim.condition("worker") == (FAILED, POD_FAILURE_POLICY)


def test_ignored_failures_lengthen_the_backoff_but_never_fail_the_index():
    sim = mwms(workers=1, chief=False, backoff_limit_per_index=0)
    delays = []
    for _ in range(8):
        sim.evict("worker", 0)
        delays.append(sim.of(Backoff)[-1].delay)
        sim.wait(delays[-1])
    assert delays == [10, 20, 40, 80, 160, 320, 600, 600]  # capped at 10 minutes
    sim.exit("worker", 0, 1)  # then a counted failure, past the limit of 0
    assert sim.condition("worker") == (FAILED, FAILED_INDEXES)


def test_without_backoff_limit_per_index_the_job_wide_backoff_limit_counts():
    doc = job_doc("worker", 2)
    del doc["spec"]["backoffLimitPerIndex"]
    sim = Sim([doc])
    assert sim.release.jobs["worker"].spec.effective_backoff_limit == 6
    for n in range(7):
        sim.exit("worker", n % 2, 1)
        if n < 6:
            assert sim.of(Backoff)[-1].delay == min(10 * 2**n, 600)
            sim.wait(sim.of(Backoff)[-1].delay)
    assert sim.condition("worker") == (FAILED, BACKOFF_LIMIT_EXCEEDED)


def test_stop_from_outside_fails_every_unfinished_job_once_its_pods_are_gone():
    sim = parameter_server()
    sim.exit("worker", 0, 1)  # in backoff: never recreated
    got = sim.run(Stop(sim.now, "run-local --timeout 5s reached"))
    assert Condition("chief", FAILURE_TARGET, STOPPED, "run-local --timeout 5s reached") in got
    assert sim.conditions() == {j: (FAILED, STOPPED) for j in ("chief", "worker", "ps")}
    assert sim.release.jobs["worker"].indexes[0].phase == "ended"
    assert sim.run(Stop(sim.now, "again")) == [] and sim.wait(3600) == []


def test_the_leading_jobs_failure_target_is_read_as_failed_before_its_pods_are_gone():
    docs = release_docs("parameterServer", {"chief": 1, "worker": 1, "ps": 1})
    release = Release([JobSpec.from_manifest(d) for d in docs])
    release.handle(Start(0))
    got = release.handle(Stop(0, "stopped"))  # no pod has exited yet: they take their grace period
    assert LeaderFinished("chief", FAILED, ("worker", "ps")) in got
    assert DeletePods("chief", (0,)) in got
    assert release.jobs["chief"].condition is None and release.jobs["chief"].outcome == FAILED


def test_a_servers_replacement_created_after_the_leader_completed_stops_at_once():
    sim = parameter_server()
    sim.evict("ps", 0)
    sim.complete("chief")
    assert sim.condition("ps") is None  # in backoff
    sim.wait(10)  # created, and its launcher finds the leading Job Complete: exit 0
    assert sim.index("ps").exit_codes == [SIGTERM_EXIT, 0] and sim.release.finished


def test_succeeded_indexes_rules():
    assert parse_indexes("0-2,5,9", 6) == {0, 1, 2, 5} and parse_indexes("x", 3) == frozenset()
    assert SuccessRule(frozenset({0, 1})).met({0, 1}) and not SuccessRule(frozenset({0, 1})).met({0, 2})
    assert SuccessRule(frozenset({0, 1, 2}), 2).met({0, 2}) and SuccessRule(None, 2).met({4, 5})


def test_parallelism_below_completions_starts_the_next_index_as_one_ends():
    doc = job_doc("worker", 3)
    doc["spec"]["parallelism"] = 2
    sim = Sim([doc])
    assert [d.index for d in sim.of(CreatePod)] == [0, 1]
    assert sim.exit("worker", 0, 0)[-1] == CreatePod("worker", 2, 0)


def test_an_exit_for_an_index_without_a_running_pod_is_refused():
    sim = mwms(workers=1, chief=False)
    sim.exit("worker", 0, 1)
    with pytest.raises(ValueError, match="no running pod"):
        sim.exit("worker", 0, 1)


def test_a_release_without_a_leader_names_none():
    doc = job_doc("worker", leader="")
    assert Release([JobSpec.from_manifest(doc)]).leader is None
    with pytest.raises(ValueError, match="only Indexed Jobs"):
        JobSpec.from_manifest({"metadata": {"name": "j"}, "spec": {"completionMode": "NonIndexed"}})
