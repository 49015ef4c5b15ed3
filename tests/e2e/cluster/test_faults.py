"""Faults on the real node: a task killed mid-run (ps, chief), an eviction, kube-apiserver down
for a minute, a kubelet restart, a trainer over its memory limit.

Each scenario is a row of docs/user-guide/lifecycle.md's table ("Faults"): it says what happens, this file
shows it. Each prints the figure it is about (seconds to recovery, the resumed epoch, failures
counted against the backoff budget) and checks that nothing was lost: the run completes and
its exported model is on the checkpoints volume.

Killing a container's process (SIGKILL through containerd, as a crash or the kernel would) and
stopping kube-apiserver or the kubelet need the node `make e2e` brings up here; against any
other cluster these scenarios skip, saying so.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_cluster import (
    EX,
    INDEX,
    KUBECONFIG,
    all_complete,
    epochs,
    install,
    log,
    no_running_pods,
    pods_of,
    pv_path_of,
    reported,
    say,
    servers_stopped_by_the_leader,
    smoke,
    wait,
    wait_for_log,
)

from tf_cluster import cluster_state, kube, progress

NODE_PKG = Path(__file__).resolve().parents[3] / "hack" / "node"  # the node harness
sys.path.insert(0, str(NODE_PKG.parent))
from node import config as node_config  # noqa: E402
from node import proc as node_proc  # noqa: E402


def on_the_harness_node() -> bool:
    return node_config.is_this_node(KUBECONFIG)


pytestmark = pytest.mark.needs(
    "the harness's node",
    on_the_harness_node(),
    "these scenarios inject node faults (SIGKILL through containerd, stopping kube-apiserver and the kubelet) "
    "on the node `make e2e` brings up here, not on any cluster",
)


# ----------------------------------------------------------------- helpers
def epoch_of(api, ns, pod: str) -> int:
    return reported(api, ns, pod).progress.get("epoch", 0)


def at_epoch(n: int):
    return lambda text: progress.TaskProgress.of_log(text).progress.get("epoch", 0) >= n


def kill_container(api, ns, pod_name: str) -> float:
    """SIGKILL the pod's `tensorflow` container through containerd (a crash, or the kernel's
    OOM killer): the pod fails with exit 137 and its Job decides what comes next."""
    from kubernetes import client

    pod = client.CoreV1Api(api).read_namespaced_pod(pod_name, ns)
    (cid,) = [cs.container_id.split("://")[1] for cs in pod.status.container_statuses if cs.name == "tensorflow"]
    node_proc.ctr("tasks", "kill", "-s", "SIGKILL", cid)
    say(f"SIGKILLed the tensorflow container of {pod_name}")
    return time.time()


def tries(api, ns, role: str, index: str = "0"):
    """Every pod of one task (Job index), oldest first."""
    return sorted(
        (p for p in pods_of(api, ns, f"-{role}-") if p.metadata.labels[INDEX] == index),
        key=lambda p: p.metadata.creation_timestamp,
    )


def node_fault(*argv: str) -> tuple[float, float, str]:
    """Run `node restart ...`; returns (wall-clock start, end, its output)."""
    t0 = time.time()
    r = subprocess.run([sys.executable, str(NODE_PKG), *argv], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    say(f"node {' '.join(argv)}: {r.stdout.strip().splitlines()[-1]}")
    return t0, time.time(), r.stdout


def progress_times(api, ns, pod: str) -> list[tuple[float, int]]:
    """(wall-clock time, epoch) of each progress report in the pod's log (the kubelet's timestamps)."""
    from kubernetes import client

    text = client.CoreV1Api(api).read_namespaced_pod_log(pod, ns, timestamps=True)
    out = []
    for line in text.splitlines():
        stamp, _, rest = line.partition(" ")
        msg = progress.parse(rest)
        if msg and msg.kind == "PROGRESS":
            out.append((kube.kubelet_time(stamp), msg.data["epoch"]))
    return out


def epoch_seconds(api, ns, pod: str) -> float:
    """The pod's mean time between progress reports of consecutive epochs (0 before two)."""
    times = progress_times(api, ns, pod)
    if len(times) < 2:
        return 0.0
    return (times[-1][0] - times[0][0]) / max(1, times[-1][1] - times[0][1])


def epochs_between(api, ns, pod: str, down: float, up: float) -> list[int]:
    """Epochs the pod reported while a component was down (a second's margin each side)."""
    return [e for t, e in progress_times(api, ns, pod) if down + 1 < t < up - 1]


def model_exported(api, ns, release: str) -> None:
    model = pv_path_of(api, ns, f"{release}-tf-cluster-checkpoints") / "model"
    assert (model / "saved_model.pb").is_file(), f"no model in {model.parent}: {sorted(model.parent.iterdir())}"


def job_of(snap: cluster_state.Snapshot, role: str):
    (job,) = [j for name, j in snap.jobs.items() if f"-tf-cluster-{role}-" in name]
    return job


def budget(snap: cluster_state.Snapshot, role: str) -> str:
    job = job_of(snap, role)
    limit = job.spec.backoff_limit_per_index
    return f"{role}: {job.status.failed or 0} failure(s) counted (backoffLimitPerIndex {limit})"


# ----------------------------------------------------------------- a task killed mid-run
def test_a_killed_ps_restarts_the_coordinator_which_resumes_from_its_checkpoint(api, ns):
    """ParameterServer: the ps holds the variables; losing it fails the coordinator (the chief),
    whose Job starts it again; it restores the last checkpoint into the new ps and goes on."""
    # 12 epochs of 60 steps (an epoch of 30 took about a second, and the poll lag before the kill
    # was up to 7 epochs): the kill must land before the last checkpoint, or nothing is resumed
    total = 12
    install(ns, "psk", EX / "parameter-server.yaml", sets=epochs(total, 60))
    chief = wait_for_log(api, ns, "psk", "-chief-", "0", at_epoch(2))
    (ps,) = tries(api, ns, "ps")
    killed = kill_container(api, ns, ps.metadata.name)
    at = epoch_of(api, ns, chief)
    assert at < total - 1, f"the ps was killed at chief epoch {at}/{total}: too late to show a resume"
    snap = wait(api, ns, "psk")
    all_complete(snap, api, ns, "psk")
    ps_tries, chief_tries = tries(api, ns, "ps"), tries(api, ns, "chief")
    assert cluster_state.exit_code(ps_tries[0]) == 137 and len(ps_tries) == 2, [
        cluster_state.termination(p) for p in ps_tries
    ]
    assert len(chief_tries) >= 2 and cluster_state.exit_code(chief_tries[0]) != 0, "the coordinator failed with its ps"
    last = chief_tries[-1].metadata.name
    resumed = reported(api, ns, last).resumed_at()
    assert resumed and resumed[-1] >= 2, log(api, ns, last)[-3000:]
    assert epoch_of(api, ns, last) == total
    first_step = progress_times(api, ns, last)[0][0]
    model_exported(api, ns, "psk")
    no_running_pods(api, ns)
    say(
        f"ps killed at chief epoch {at}/{total}; the chief failed (exit {cluster_state.exit_code(chief_tries[0])}), "
        f"came back and resumed after epoch {resumed[-1]}; {first_step - killed:.0f}s from the kill to its next epoch; "
        f"{budget(snap, 'chief')}; {budget(snap, 'ps')}"
    )


@pytest.mark.parametrize("strategy", ["parameterServer", "multiWorkerMirrored"])
def test_a_killed_chief_resumes_from_its_checkpoint_and_the_others_still_stop(api, ns, strategy):
    """The chief's Job starts it again; it resumes after its last checkpoint. ParameterServer:
    the ps, workers and evaluator keep serving through it and still stop by themselves once the
    chief's Job is Complete. MultiWorkerMirrored with a chief: the worker's collectives fail
    with it, so both restart and both resume from the backup."""
    if strategy == "parameterServer":  # 12 epochs of 60 steps: the kill lands well before the last checkpoint
        total = 12
        install(ns, "ck", EX / "parameter-server-evaluator.yaml", sets=epochs(total, 60))
    else:
        total = 6
        install(
            ns,
            "ck",
            EX / "mwms-cpu.yaml",
            sets=("roles.chief.replicas=1", "roles.worker.replicas=1", *epochs(total, 150)),
        )
    chief = wait_for_log(api, ns, "ck", "-chief-", "0", at_epoch(2))
    killed = kill_container(api, ns, chief)
    at = epoch_of(api, ns, chief)
    assert at < total - 1, f"the chief was killed at epoch {at}/{total}: too late to show a resume"
    snap = wait(api, ns, "ck")
    all_complete(snap, api, ns, "ck")
    chief_tries = tries(api, ns, "chief")
    assert cluster_state.exit_code(chief_tries[0]) == 137 and len(chief_tries) >= 2, [
        p.metadata.name for p in chief_tries
    ]
    last = chief_tries[-1].metadata.name
    resumed = reported(api, ns, last).resumed_at()
    assert resumed and resumed[-1] >= 2, log(api, ns, last)[-3000:]
    assert epoch_of(api, ns, last) == total
    recovered = progress_times(api, ns, last)[0][0] - killed
    model_exported(api, ns, "ck")
    if kube.serves_gang_api(api):  # the replacement joined the running gang (minCount met): placed alone
        from kubernetes import client

        group = chief_tries[-1].spec.scheduling_group
        assert group is not None, "a replacement joins its run's PodGroup"
        mode = client.SchedulingV1beta1Api(api).read_namespaced_pod_group(group.pod_group_name, ns).spec.disruption_mode
        assert (mode.all if strategy == "multiWorkerMirrored" else mode.single) is not None, mode
    if strategy == "parameterServer":
        for role in ("ps", "worker", "evaluator"):  # served through the chief's restart: never replaced
            assert (job_of(snap, role).status.failed or 0) == 0, role
        servers_stopped_by_the_leader(api, ns, "ck", snap)
    else:
        worker = tries(api, ns, "worker")
        w_resumed = reported(api, ns, worker[-1].metadata.name).resumed_at()
        say(f"worker 0: {len(worker)} pod(s), last resumed at {w_resumed}")
        assert epoch_of(api, ns, worker[-1].metadata.name) == total
    no_running_pods(api, ns)
    say(
        f"{strategy}: chief killed at epoch {at}/{total}, resumed after epoch {resumed[-1]}, "
        f"{recovered:.0f}s from the kill to its next epoch; {budget(snap, 'chief')}"
    )


# ----------------------------------------------------------------- eviction
def test_an_evicted_pod_is_replaced_without_using_the_backoff_budget(api, ns):
    """The Eviction API (a node drain, `kubectl drain`) marks the pod DisruptionTarget; the chart's
    podFailurePolicy ignores such failures, so the replacement starts with its budget whole."""
    from kubernetes import client

    # The run must outlast the replacement's start: the Job controller creates it 10 s after the
    # evicted pod failed (its pod-failure backoff counts ignored failures too: job_controller.go,
    # getRemainingTimePerIndex), and it serves ~5 s later, ~15 s in all. On an idle node an epoch of
    # 150 steps took 0.76 s (the eviction at epoch 2 of 16 left 11 s: the run ended first, twice in
    # a row); busy beside another lane, ~3 s. 36 epochs, evicted at the first, leave >= 26 s.
    total = 36
    install(
        ns,
        "ev",
        EX / "parameter-server.yaml",
        sets=epochs(total, 150),
    )
    chief = wait_for_log(api, ns, "ev", "-chief-", "0", at_epoch(1))
    (victim,) = tries(api, ns, "worker", "1")
    t0 = time.time()
    evict(api, ns, victim.metadata.name)
    marked = None  # the evicted pod's DisruptionTarget condition, read before the pod is gone
    deadline = time.monotonic() + 60
    while marked is None and time.monotonic() < deadline:
        try:
            pod = client.CoreV1Api(api).read_namespaced_pod(victim.metadata.name, ns)
        except client.ApiException as e:
            assert e.status == 404, e
            break
        marked = next((c for c in pod.status.conditions or [] if c.type == "DisruptionTarget"), None)
        time.sleep(0.5)
    assert marked is not None and marked.status == "True", "the evicted pod was marked DisruptionTarget"
    # Seen while it runs: once the chief's Job completes, the worker Job (done when one worker was
    # stopped by that, successPolicy) removes a worker still running, so it may be gone afterwards.
    replacement = None
    while replacement is None and time.monotonic() < deadline + 120:
        for p in tries(api, ns, "worker", "1"):
            if p.metadata.name != victim.metadata.name and p.status.phase == "Running":
                if "serving worker:1" in log(api, ns, p.metadata.name):
                    replacement = p
        if replacement is None and job_of(kube.snapshot(api, ns, "ev"), "chief").status.succeeded:
            pytest.fail(
                f"the run ended {time.time() - t0:.0f}s after the eviction, before a worker 1 rejoined: "
                f"{epoch_seconds(api, ns, chief):.2f}s an epoch here; {total} epochs are too few for this pace"
            )
        time.sleep(1)
    assert replacement is not None, "no worker 1 rejoined the cluster:\n" + kube.diagnostics(api, ns, "ev")
    started = replacement.status.start_time.timestamp() - t0
    notes = replacement.metadata.annotations or {}
    assert notes.get("batch.kubernetes.io/job-index-failure-count") == "0", notes
    assert notes.get("batch.kubernetes.io/job-index-ignored-failure-count") == "1", notes
    snap = wait(api, ns, "ev")
    all_complete(snap, api, ns, "ev")
    assert (job_of(snap, "worker").status.failed or 0) == 0
    model_exported(api, ns, "ev")
    no_running_pods(api, ns)
    # ParameterServer has no PreemptionCheckpointHandler (TensorFlow refuses it for this strategy,
    # failure_handling.py); the coordinator reruns on another worker the call the evicted one had in
    # flight (cluster_coordinator.py puts a closure whose worker failed back in its queue), so up
    # to one call's steps (steps_per_execution=5 in the example) are done twice, none lost
    (chief,) = tries(api, ns, "chief")
    steps = reported(api, ns, chief.metadata.name).result["steps"]
    twice = steps - total * 150
    say(
        f"evicted worker 1 ({marked.reason}); its replacement started {started:.0f}s later "
        f"with annotations failure-count 0, ignored-failure-count 1; {budget(snap, 'worker')}; "
        f"the ps applied {steps} steps for {total} x 150: {twice} done twice; "
        f"{epoch_seconds(api, ns, chief.metadata.name):.2f}s an epoch"
    )
    assert 0 <= twice <= 5, steps


def step_events(api, ns, pods) -> list[dict]:
    """The trainer's `stopped` and `resumed` events (each with its step) of these pods, in order."""
    return [
        {"pod": pod.metadata.name, **e}
        for pod in pods
        for e in reported(api, ns, pod.metadata.name).events
        if e.get("event") in ("stopped", "resumed")
    ]


def evict(api, ns, pod_name: str) -> None:
    from kubernetes import client

    client.CoreV1Api(api).create_namespaced_pod_eviction(
        pod_name, ns, client.V1Eviction(metadata=client.V1ObjectMeta(name=pod_name, namespace=ns))
    )
    say(f"evicted {pod_name} through the Eviction API")


# Epochs and steps per epoch of the preemption scenario, ~12 ms a step on this node (two 1-CPU
# workers). With the save at the step: 3 epochs of ~18 s, the eviction 6 s into the second. With
# epoch backups only, TensorFlow trains on through the launcher's 20 s grace before the kill (see
# lifecycle.md, Signals): epochs of ~70 s, so that the kill too lands mid-epoch.
PREEMPT_RUN = {"at-the-step": (3, 1500), "at-epochs": (2, 6000)}


@pytest.mark.parametrize(
    "saved", ["at-the-step", pytest.param("at-epochs", marks=pytest.mark.extended)], ids=["after", "before"]
)
def test_an_evicted_mwms_worker_costs_no_step(api, ns, saved):
    """A MultiWorkerMirrored worker evicted mid-epoch (a drain, a spot reclaim). The example trainer
    turns on TensorFlow's PreemptionCheckpointHandler: the SIGTERM the launcher forwards makes every
    task finish the step in progress, save at that same step and exit 42, which `job.restartExitCodes`
    retries without counting; the next run resumes at that step. "before" is the trainer with it
    off (PREEMPTION_CHECKPOINT=0, BackupAndRestore's epoch backups only): it resumes at the last
    epoch's end. The figure is the steps done twice: the chief's last step before the eviction's
    restart minus the step it resumed at (docs/user-guide/lifecycle.md, "Preemption")."""
    total, steps = PREEMPT_RUN[saved]
    sets = epochs(total, steps)
    if saved == "at-epochs":
        sets += ("env[2].name=PREEMPTION_CHECKPOINT", "env[2].value=0")
    install(ns, "pre", EX / "mwms-cpu.yaml", sets=sets)
    wait_for_log(api, ns, "pre", "-worker-", "0", at_epoch(1))
    time.sleep(6)  # a third of an epoch in
    (victim,) = tries(api, ns, "worker", "1")
    evict(api, ns, victim.metadata.name)
    snap = wait(api, ns, "pre")
    all_complete(snap, api, ns, "pre")
    chief_tries = tries(api, ns, "worker", "0")
    events = step_events(api, ns, chief_tries)
    stops = [e for e in events if e["event"] == "stopped"]
    resumes = [e for e in events if e["event"] == "resumed"]
    # a str, which pytest shows whole (a tuple's repr is cut at 240 characters): every task's tries
    # with how each ended, which names a follower that cut a leader's try short
    assert len(chief_tries) == 2 and len(stops) == 1 and len(resumes) == 1, (
        f"worker 0's tries: {[(p.metadata.name, cluster_state.termination(p)) for p in chief_tries]}; "
        f"worker 1's: {[(p.metadata.name, cluster_state.termination(p)) for p in tries(api, ns, 'worker', '1')]}; "
        f"step events: {events}"
    )
    lost = stops[0]["step"] - resumes[0]["step"]
    codes = [cluster_state.exit_code(p) for p in chief_tries]
    failed = job_of(snap, "worker").status.failed or 0
    say(
        f"{saved}: worker 1 evicted; the chief stopped at step {stops[0]['step']} (epoch {stops[0]['epoch'] + 1} "
        f"of {total}, {steps} steps each), resumed at step {resumes[0]['step']}: {lost} step(s) done twice; "
        f"the chief's exit codes {codes}; {failed} failure(s) counted"
    )
    model_exported(api, ns, "pre")
    if saved == "at-the-step":
        assert lost <= 1, events
        assert codes[0] == 42 and failed == 0, (codes, failed)  # a restart, not a failure
    else:
        assert lost > 1, events  # the figure the handler saves: the steps since the last epoch's backup


# ----------------------------------------------------------------- the control plane and the node agent
def test_training_goes_on_while_kube_apiserver_is_down_for_60s(api, ns):
    """ParameterServer: the ps and workers' launchers watch the chief's Job through the API. With
    the API gone for a minute their watches reconnect with backoff; nothing stops, nothing
    restarts, training goes on, and the run completes once the API is back."""
    install(
        ns,
        "api",
        EX / "parameter-server.yaml",
        sets=epochs(24, 100),
    )
    chief = wait_for_log(api, ns, "api", "-chief-", "0", at_epoch(1))
    down, up, _ = node_fault("restart", "kube-apiserver", "--down", "60")
    snap = wait(api, ns, "api")
    all_complete(snap, api, ns, "api")
    during = epochs_between(api, ns, chief, down, up)
    assert len(during) >= 2, f"the chief reported no epoch while the API was down: {progress_times(api, ns, chief)}"
    assert epoch_of(api, ns, chief) == 24
    for role, n in (("chief", 1), ("ps", 1), ("worker", 2)):  # no pod stopped, failed or was replaced
        assert len(pods_of(api, ns, f"-{role}-")) <= n, (role, [p.metadata.name for p in pods_of(api, ns, f"-{role}-")])
        assert (job_of(snap, role).status.failed or 0) == 0, role
    # Each server follows the chief's Job with a watch (chart 1.0.0), not a GET every 5 s: one whose
    # connection outlived the outage unnoticed (a closed connection can take TCP keepalive's ~60 s
    # to surface through the service NAT) and re-watched once the API was back never logged a
    # retry, which is right. So a retry is reported, not required: what is required is above
    # (training went on, nothing stopped or restarted) and below (the run completed).
    retried = [p.metadata.name for p in pods_of(api, ns, "-worker-") + pods_of(api, ns, "-ps-")]
    retried = [n for n in retried if "retrying" in log(api, ns, n, container="tf-cluster-agent")]
    model_exported(api, ns, "api")
    no_running_pods(api, ns)
    say(
        f"kube-apiserver down {up - down:.0f}s (60 s + start): the chief trained epochs {during[0]}-{during[-1]} "
        f"meanwhile; {len(retried)} launcher(s) logged a retry of their Job watch; all kept serving; 0 restarted"
    )


def test_pods_keep_running_through_a_kubelet_restart(api, ns):
    install(
        ns,
        "kl",
        EX / "mwms-cpu.yaml",
        sets=epochs(8, 150),
    )
    w0 = wait_for_log(api, ns, "kl", "-worker-", "0", at_epoch(1))
    before = {p.metadata.name: p.metadata.uid for p in pods_of(api, ns, "-worker-")}
    down, up, _ = node_fault("restart", "kubelet", "--down", "10")
    snap = wait(api, ns, "kl")
    all_complete(snap, api, ns, "kl")
    after = pods_of(api, ns, "-worker-")
    assert {p.metadata.name: p.metadata.uid for p in after} == before, "the same pods ran on"
    assert all(cs.restart_count == 0 for p in after for cs in p.status.container_statuses)
    during = epochs_between(api, ns, w0, down, up)
    assert during, f"no epoch while the kubelet was down: {progress_times(api, ns, w0)}"
    assert epoch_of(api, ns, w0) == 8
    model_exported(api, ns, "kl")
    no_running_pods(api, ns)
    say(f"kubelet down and back in {up - down:.0f}s (node Ready again); epochs {during} trained meanwhile; 0 restarts")


# ----------------------------------------------------------------- a trainer over its memory limit
def test_a_trainer_over_its_memory_limit_is_retried_and_smoke_says_oomkilled(ns, api, tmp_path):
    hog = tmp_path / "hog.py"
    hog.write_text("print('loading the whole dataset into memory', flush=True)\nblob = b'x' * (1 << 30)\n")
    r = smoke(
        ns,
        "oom",
        *("-f", EX / "mwms-cpu.yaml", "--script", hog, "--timeout", "300"),
        *("--set", "roles.worker.replicas=1", "--set", "roles.worker.resources.limits.memory=256Mi"),
        *("--set", "job.backoffLimitPerIndex=1", "--set", "storage.checkpoints.type=emptyDir"),
    )
    out = r.stdout + r.stderr
    print(out[-3000:])
    assert r.returncode != 0, out[-3000:]
    pods = tries(api, ns, "worker")
    assert len(pods) == 2 and all(cluster_state.exit_code(p) == 137 for p in pods), [
        cluster_state.termination(p) for p in pods
    ]
    assert "exit 137 (OOMKilled)" in out and "roles.worker.resources.limits.memory" in out, out[-3000:]
    say(f"OOMKilled twice (backoffLimitPerIndex 1), smoke exit {r.returncode}: {cluster_state.termination(pods[-1])}")
