"""`tf-cluster status`'s table from Job and pod objects (as dicts, the API's JSON, or as the
kubernetes client's models): each task's state and why it waits or failed, its restarts from the
Job's per-index failure counts, its progress from its log; the Jobs' conditions. The same table
run-local redraws (runner.status_table)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from tf_cluster import cluster_state
from tf_cluster.cluster_state import cluster_report, indexes
from tf_cluster.runner import TaskReport, status_table

NOW = datetime(2026, 11, 25, 12, 0, 0, tzinfo=timezone.utc)
T0 = "2026-11-25T11:58:00Z"  # two minutes before NOW
KERAS = "Epoch 2/5\n10/10 [==============================] - 1s 5ms/step - loss: 0.4137 - accuracy: 0.8500\n"


def job(role: str, completions: int = 1, status: dict | None = None, **spec) -> dict:
    return {
        "metadata": {
            "name": f"tf-tf-cluster-{role}-abc12",
            "labels": {cluster_state.INSTANCE: "tf", cluster_state.COMPONENT: role},
        },
        "spec": {"completions": completions, "template": {"spec": {"containers": []}}, **spec},
        "status": status or {},
    }


def pod(role: str, index: int, phase: str, name: str = "", created: str = T0, **status) -> dict:
    annotations = status.pop("annotations", {})
    node = status.pop("node", "node-1" if phase != "Pending" else None)
    return {
        "metadata": {
            "name": name or f"tf-tf-cluster-{role}-abc12-{index}-xyz",
            "creationTimestamp": created,
            "labels": {
                cluster_state.INSTANCE: "tf",
                cluster_state.COMPONENT: role,
                cluster_state.JOB_NAME_LABEL: f"tf-tf-cluster-{role}-abc12",
                cluster_state.INDEX_LABEL: str(index),
            },
            "annotations": annotations,
        },
        "spec": {"containers": [{"name": "tensorflow", "image": "trainer"}], "nodeName": node},
        "status": {"phase": phase, **status},
    }


def container(**state) -> list[dict]:
    return [
        {"name": "tensorflow", "image": "trainer", "imageID": "", "ready": False, "restartCount": 0, "state": state}
    ]


def ended(code: int, reason: str = "Error", at: str = "2026-11-25T11:59:00Z") -> list[dict]:
    return container(terminated={"exitCode": code, "reason": reason, "startedAt": T0, "finishedAt": at})


def report(jobs, pods, logs=None, as_models=False, **kw):
    if as_models:
        from kubernetes import client

        jobs = [client.V1Job.from_dict(j) for j in jobs]
        pods = [client.V1Pod.from_dict(p) for p in pods]
    snap = cluster_state.Snapshot.of(jobs, pods)
    return cluster_report(snap, "ns/tf", lambda p: (logs or {}).get(p.metadata.name, ""), now=NOW, **kw)


def by_name(rep) -> dict[str, TaskReport]:
    return {t.name: t for t in rep.tasks}


UNSCHEDULABLE = "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available."


@pytest.mark.parametrize("as_models", [False, True], ids=["dicts", "models"])
def test_every_task_of_a_running_release_with_its_state_restarts_and_progress(as_models):
    jobs = [
        job("chief", status={"active": 1}),
        job("worker", 3, status={"active": 3, "failed": 1}),
        job("ps", status={}),
    ]
    pods = [
        pod("chief", 0, "Running", startTime=T0, containerStatuses=container(running={"startedAt": T0})),
        pod(
            "worker",
            0,
            "Pending",
            conditions=[
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": UNSCHEDULABLE}
            ],
        ),
        pod(
            "worker", 1, "Pending", node="node-2", containerStatuses=container(waiting={"reason": "ContainerCreating"})
        ),
        pod("worker", 2, "Failed", name="w2-first", startTime=T0, containerStatuses=ended(137, "OOMKilled")),
        pod(
            "worker",
            2,
            "Running",
            name="w2-second",
            created="2026-11-25T11:59:10Z",
            startTime="2026-11-25T11:59:10Z",
            annotations={cluster_state.FAILURE_COUNT: "1"},
            containerStatuses=container(running={"startedAt": "2026-11-25T11:59:10Z"}),
        ),
    ]
    logs = {"tf-tf-cluster-chief-abc12-0-xyz": KERAS, "w2-first": "Epoch 1/5\n", "w2-second": KERAS}
    rep = report(jobs, pods, logs, as_models=as_models)
    tasks = by_name(rep)
    assert list(tasks) == ["chief-0", "worker-0", "worker-1", "worker-2", "ps-0"]  # the chart's role order

    chief = tasks["chief-0"]
    assert (chief.state, chief.restarts, chief.seconds) == ("running", 0, 120.0)
    assert chief.reported.summary() == "epoch 2/5, loss 0.4137, accuracy 0.8500"

    w0 = tasks["worker-0"]
    assert (w0.state, w0.detail, w0.seconds) == ("pending", "Unschedulable", None)
    assert w0.why == f"Unschedulable: {UNSCHEDULABLE}"
    assert (tasks["worker-1"].state, tasks["worker-1"].detail) == ("pending", "ContainerCreating")

    w2 = tasks["worker-2"]  # replaced once after an OOM kill: its newest pod runs, counted by the Job's annotation
    assert (w2.state, w2.restarts, w2.exit_codes) == ("running", 1, [137])
    assert w2.reported.summary() == "epoch 2/5, loss 0.4137, accuracy 0.8500" and w2.seconds == 120.0

    ps = tasks["ps-0"]  # a Job without its pod: listed, and why
    assert (ps.state, ps.detail) == ("pending", "no pod")
    assert ps.why == "Job tf-tf-cluster-ps-abc12 has not created its pod yet"
    assert w2.why == "its previous pod failed (exit 137, OOMKilled)"
    old = report([{**jobs[2], "metadata": {**jobs[2]["metadata"], "creationTimestamp": T0}}], [])
    assert old.tasks[0].why == (
        "Job tf-tf-cluster-ps-abc12 has not created its pod in 120s: "
        "is the cluster's Job controller (kube-controller-manager) running?"
    )

    assert rep.job_lines() == [
        "Job tf-tf-cluster-chief-abc12: running (0/1 done, 1 active)",
        "Job tf-tf-cluster-ps-abc12: running (0/1 done)",
        "Job tf-tf-cluster-worker-abc12: running (0/3 done, 3 active, 1 failed)",
    ]
    text = rep.status()
    table = text.split("\n\n")[1].splitlines()
    assert table[0].split() == ["TASK", "STATE", "RESTARTS", "TIME", "PROGRESS"]
    assert table[1].split() == [
        "chief-0",
        "running",
        "0",
        "120.0s",
        "epoch",
        "2/5,",
        "loss",
        "0.4137,",
        "accuracy",
        "0.8500",
    ]
    assert table[2].split() == ["worker-0", "pending", "(Unschedulable)", "0", "-", "-"]
    assert table[3].split() == ["worker-1", "pending", "(ContainerCreating)", "0", "-", "-"]
    assert table[4].split()[:4] == ["worker-2", "running", "1", "120.0s"]
    assert table[5].split() == ["ps-0", "pending", "(no", "pod)", "0", "-", "-"]
    assert f"  worker-0: Unschedulable: {UNSCHEDULABLE}" in text.split("Why:\n")[1].splitlines()


def test_a_failed_task_shows_its_exit_code_and_the_pod_failure_policy_rule_that_failed_the_job():
    msg = "Container tensorflow for pod ns/w1 failed with exit code 3 matching FailJob rule at index 1"
    cond = [
        {"type": t, "status": "True", "reason": "PodFailurePolicy", "message": msg} for t in ("FailureTarget", "Failed")
    ]
    jobs = [job("worker", 2, status={"failed": 1, "succeeded": 0, "conditions": cond})]
    pods = [
        pod("worker", 0, "Failed", name="w0", startTime=T0, containerStatuses=ended(143)),
        pod("worker", 1, "Failed", name="w1", startTime=T0, containerStatuses=ended(3)),
    ]
    rep = report(jobs, pods)
    w0, w1 = rep.tasks
    assert (w1.state, w1.detail, w1.exit_codes, w1.seconds) == ("failed", "exit 3", [3], 60.0)
    assert w1.why == f"PodFailurePolicy: {msg}"
    assert (w0.state, w0.detail, w0.why) == ("failed", "exit 143", "")  # stopped by the Job, not judged by the rule
    assert rep.job_lines() == [f"Job tf-tf-cluster-worker-abc12: Failed (PodFailurePolicy: {msg})"]
    assert "failed (exit 3)" in rep.status()


def test_a_failed_pod_its_job_replaces_is_in_backoff_and_the_failure_counts_are_its_restarts():
    jobs = [job("worker", 2, backoffLimitPerIndex=3, status={"active": 1, "failed": 3, "failedIndexes": "1"})]
    pods = [
        # index 0: failed twice before (the older pods already gone), the third attempt failed too: a fourth follows
        pod(
            "worker",
            0,
            "Failed",
            startTime=T0,
            containerStatuses=ended(1),
            annotations={cluster_state.FAILURE_COUNT: "2"},
        ),
        # index 1: out of retries, the index failed
        pod(
            "worker",
            1,
            "Failed",
            startTime=T0,
            containerStatuses=ended(1),
            annotations={cluster_state.FAILURE_COUNT: "3"},
        ),
    ]
    w0, w1 = report(jobs, pods).tasks
    assert (w0.state, w0.restarts, w0.detail) == ("backoff", 2, "exit 1")
    assert (w1.state, w1.restarts) == ("failed", 3)


def test_a_disrupted_pod_is_said_not_to_count_and_ignored_failures_are_restarts_too():
    evicted = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI", "message": "drained"}
    jobs = [job("worker", 1, status={"active": 1})]
    pods = [
        pod("worker", 0, "Failed", name="a", startTime=T0, conditions=[evicted], containerStatuses=ended(143)),
        pod(
            "worker",
            0,
            "Pending",
            name="b",
            created="2026-11-25T11:59:30Z",
            annotations={cluster_state.IGNORED_COUNT: "1"},
            node=None,
        ),
    ]
    (w0,) = report(jobs, pods).tasks
    assert (w0.state, w0.detail, w0.restarts, w0.exit_codes) == ("pending", "unscheduled", 1, [143])
    assert w0.why == "no scheduler has placed it yet; its previous pod failed (exit 143)"
    first = report(jobs, pods[:1]).tasks[0]
    assert first.state == "backoff"
    assert first.why == "disrupted (EvictionByEvictionAPI: drained): not counted against its retries"


def test_job_conditions_and_tasks_a_job_did_not_create():
    queue = {"kueue.x-k8s.io/queue-name": "team-a"}
    suspended = job(
        "worker",
        2,
        suspend=True,
        status={"conditions": [{"type": "Suspended", "status": "True", "reason": "JobSuspended"}]},
    )
    suspended["metadata"]["labels"].update(queue)
    quota = job("chief", status={})
    ending = job(
        "ps",
        status={
            "active": 1,
            "conditions": [{"type": "SuccessCriteriaMet", "status": "True", "reason": "SuccessPolicy"}],
        },
    )
    warning = "FailedCreate: pods is forbidden: exceeded quota: compute, requested: cpu=4, limited: cpu=2"
    rep = report(
        [suspended, quota, ending],
        [pod("ps", 0, "Succeeded", startTime=T0, containerStatuses=ended(0, "Completed"))],
        job_warnings={"tf-tf-cluster-chief-abc12": warning},
    )
    tasks = by_name(rep)
    assert tasks["chief-0"].why == f"Job tf-tf-cluster-chief-abc12 has not created its pod: {warning}"
    assert (tasks["worker-1"].detail, tasks["worker-1"].why) == (
        "suspended",
        "Job tf-tf-cluster-worker-abc12 is suspended: it waits in Kueue queue team-a for quota",
    )
    assert (tasks["ps-0"].state, tasks["ps-0"].detail, tasks["ps-0"].seconds) == ("succeeded", "", 60.0)
    assert rep.job_lines() == [
        "Job tf-tf-cluster-chief-abc12: running (0/1 done)",
        "Job tf-tf-cluster-ps-abc12: running (0/1 done, 1 active, SuccessCriteriaMet (SuccessPolicy))",
        "Job tf-tf-cluster-worker-abc12: running (0/2 done, suspended: waits in Kueue queue team-a)",
    ]


def test_a_finished_job_lists_only_the_tasks_it_ran():
    done = {"succeeded": 1, "completedIndexes": "0", "conditions": [{"type": "Complete", "status": "True"}]}
    rep = report(
        [job("worker", 2, status=done)], [pod("worker", 0, "Succeeded", startTime=T0, containerStatuses=ended(0))]
    )
    assert [t.name for t in rep.tasks] == ["worker-0"] and rep.ok
    assert indexes("0,2-4,7") == {0, 2, 3, 4, 7} and indexes(None) == set()


def test_run_local_and_status_print_one_table():
    """run-local's live table is runner.status_table too: the same columns, cells and widths."""
    from tf_cluster.localrun import local_runner

    assert local_runner.status_table is status_table
    text = status_table([TaskReport("worker-0", "worker", 0, "running", 2, seconds=3.25)])
    assert text.splitlines() == [
        "TASK      STATE    RESTARTS  TIME    PROGRESS",
        "worker-0  running  2           3.2s  -",
    ]


def test_what_smoke_says_about_a_failed_run_and_its_stuck_pods():
    """The readings `kube.diagnostics` and `kube.wait_for_jobs` print (else seen only on a cluster):
    a Failed Job's reason, which pods' logs to show, the memory advice, pods that cannot start."""
    failed = {"failed": 2, "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}
    pulling = container(waiting={"reason": "ImagePullBackOff", "message": "Back-off pulling image"})
    pods = [
        pod("worker", 0, "Failed", startTime=T0, containerStatuses=ended(137, "OOMKilled")),
        pod("worker", 1, "Succeeded", startTime=T0, containerStatuses=ended(0, "Completed")),
        pod("ps", 0, "Pending", containerStatuses=pulling, node="node-1"),
    ]
    snap = cluster_state.Snapshot.of([job("worker", 2, status=failed), job("ps", status={"active": 1})], pods)
    oom, done, stuck = snap.pods
    assert snap.failed_jobs() == ["Job tf-tf-cluster-worker-abc12 Failed: BackoffLimitExceeded"]
    assert [cluster_state.needs_a_look(p) for p in snap.pods] == [True, False, True]
    assert cluster_state.termination(oom) == "Failed, exit 137 (OOMKilled)"
    assert cluster_state.memory_advice(oom) == (
        "tf-tf-cluster-worker-abc12-0-xyz used more memory than its limit and the kernel killed it: raise "
        "roles.worker.resources.limits.memory (or lower the batch size)"
    )
    assert cluster_state.memory_advice(done) == ""
    assert snap.stuck() == [f"pod {stuck.metadata.name}: ImagePullBackOff: Back-off pulling image"]
    assert snap.stuck(skip={stuck.metadata.name}) == []
    assert snap.role_line() == "ps 0/1 done (1 ImagePullBackOff) | worker Failed"
    assert snap.owing_jobs() == [] and snap.leader() is None


def test_cluster_state_reads_objects_and_kube_fetches_them():
    """One module interprets Jobs and pods (issue 45): it makes no API call and imports no `kube`;
    its readers are defined nowhere else in the tooling."""
    import ast

    from tf_cluster import ROOT

    source = (ROOT / "tooling" / "tf_cluster" / "cluster_state.py").read_text()
    imported = {
        a.name for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ImportFrom | ast.Import) for a in n.names
    }
    assert "kube" not in imported and "CoreV1Api" not in source
    readers = {"failed_reason", "job_state", "exit_code", "pod_state", "pending_reason", "termination"}
    elsewhere = [
        f"{path.relative_to(ROOT)}: {node.name}"
        for path in (ROOT / "tooling" / "tf_cluster").rglob("*.py")
        if path.name != "cluster_state.py"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef) and node.name in readers
    ]
    assert elsewhere == []


def test_a_release_has_started_once_every_index_of_every_running_job_has_a_running_pod():
    """What `tf-cluster install` waits for (--wait started): each Job finished, or a Running or
    Succeeded pod (not one being deleted) for every index it wants."""
    done = {"conditions": [{"type": "Complete", "status": "True"}], "succeeded": 1}
    workers = job("worker", completions=2)
    one_running = [pod("worker", 0, "Running"), pod("worker", 1, "Pending")]
    both = [pod("worker", 0, "Succeeded"), pod("worker", 1, "Running")]
    leaving = [pod("worker", 0, "Running"), pod("worker", 1, "Running")]
    leaving[1]["metadata"]["deletionTimestamp"] = T0
    assert not cluster_state.Snapshot.of([], []).started()
    assert not cluster_state.Snapshot.of([workers], one_running).started()
    assert not cluster_state.Snapshot.of([workers], leaving).started()
    assert cluster_state.Snapshot.of([workers], both).started()
    assert cluster_state.Snapshot.of([job("chief", status=done), workers], both).started()  # a finished Job: begun


def test_install_stops_waiting_once_every_task_started_or_a_job_failed():
    from tf_cluster.commands.install import started

    failed = {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}], "failed": 2}
    workers = job("worker", completions=2)
    assert started(cluster_state.Snapshot.of([workers], [pod("worker", 0, "Pending")])) == ""
    assert started(cluster_state.Snapshot.of([job("chief", status=failed), workers], [])) == "a Job failed"
    both = [pod("worker", 0, "Running"), pod("worker", 1, "Running")]
    assert started(cluster_state.Snapshot.of([workers], both)) == "every task started"
