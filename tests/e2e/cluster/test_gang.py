"""All or nothing on the real node (Kubernetes 1.37, scheduling.k8s.io/v1beta1 served, the
GenericWorkload gate on: hack/node/control_plane.py): a release that does not fit
starts no pod at all, says why, and starts whole when room appears; two releases that do not fit
together run one after the other. The node has 2 CPUs: each scenario first measures what is free
and sizes a blocker release to leave room for one gang pod but not for two."""

from __future__ import annotations

import os
import signal
import threading
import time
from decimal import Decimal
from pathlib import Path

import pytest
import yaml
from needs import absent
from test_cluster import EX, SMALL, all_complete, helm_in, install, pods_of, say, wait

from tf_cluster import gang, helm, kube

QUICK = ("env[0].name=EPOCHS", "env[0].value=1", "env[1].name=STEPS_PER_EPOCH", "env[1].value=20")
TASK_CPU = Decimal("0.3")  # each gang task's request


@pytest.fixture(autouse=True)
def gang_api(api):
    if not kube.serves_gang_api(api):
        absent(
            "the PodGroup API (scheduling.k8s.io/v1beta1)", "a cluster serving it (1.37, GenericWorkload): `make e2e`"
        )


def free_cpu(api) -> Decimal:
    _, free = gang.capacity(api)
    return free["cpu"]


def sized(cpu: Decimal) -> tuple[str, ...]:
    m = f"{int(cpu * 1000)}m"
    return (f"roles.worker.resources.requests.cpu={m}", f"roles.worker.resources.limits.cpu={m}")


def start_blocker(api, ns, leave: Decimal, seconds: int = 3600) -> None:
    """A one-task release holding all but `leave` CPUs for `seconds` (or until removed)."""
    hold = free_cpu(api) - leave
    assert hold > 0, f"the node has only {free_cpu(api)} CPU free"
    values = helm.Values.of(
        [SMALL],
        set=["roles.worker.replicas=1", "scheduling.gang=false", *sized(hold)],
        set_string=[],
    )
    argv = ["--set-json", f'command=["python3","-c","import time; time.sleep({seconds})"]']
    r = helm_in(ns).run("install", "blocker", helm.CHART, *values.argv(), *argv)
    assert r.returncode == 0, r.stderr
    deadline = time.monotonic() + 120
    while not [p for p in pods_of(api, ns, "blocker-") if p.status.phase == "Running"]:
        assert time.monotonic() < deadline, kube.diagnostics(api, ns, "blocker")
        time.sleep(1)
    say(f"blocker holds {hold} CPU for {seconds}s; {free_cpu(api)} CPU left free")


def remove_now(api, ns, release: str) -> None:
    """Uninstall, and remove the release's pods at once (no grace period): their CPU is free again
    as soon as the API says they are gone, without waiting ~60 s for a terminating trainer."""
    from kubernetes import client

    assert helm_in(ns).uninstall(release).returncode == 0
    for p in pods_of(api, ns, f"{release}-"):
        try:
            client.CoreV1Api(api).delete_namespaced_pod(p.metadata.name, ns, grace_period_seconds=0)
        except client.ApiException as e:
            assert e.status == 404, e  # gone already
    deadline = time.monotonic() + 60
    while pods_of(api, ns, f"{release}-"):
        assert time.monotonic() < deadline, f"{release}'s pods still there after 60s"
        time.sleep(0.5)
    say(f"{release} removed, its pods gone")


def bound(api, ns, release: str) -> list:
    return [p for p in pods_of(api, ns, f"{release}-tf-cluster-worker") if p.spec.node_name]


def started_at(p) -> float:
    """When the scheduler bound the pod (PodScheduled=True)."""
    (c,) = [c for c in p.status.conditions or [] if c.type == "PodScheduled" and c.status == "True"]
    return c.last_transition_time.timestamp()


def test_a_gang_that_does_not_fit_starts_no_pod_then_starts_whole(api, ns):
    from kubernetes import client

    start_blocker(api, ns, leave=TASK_CPU + Decimal("0.1"))  # until removed below

    # Baseline (no gang, as before 0.4.0): one of the two workers starts and waits for its peer.
    install(ns, "half", EX / "mwms-cpu.yaml", sets=(*QUICK, *sized(TASK_CPU), "scheduling.gang=false"))
    time.sleep(15)
    half = pods_of(api, ns, "half-tf-cluster-worker")
    assert len(half) == 2 and len(bound(api, ns, "half")) == 1, [(p.metadata.name, p.spec.node_name) for p in half]
    say("without the gang: 1 of 2 workers placed, holding its CPU while it waits for the other")
    remove_now(api, ns, "half")

    # With the gang (auto: the node serves the API): no pod placed, and the reason in words.
    install(ns, "whole", EX / "mwms-cpu.yaml", sets=(*QUICK, *sized(TASK_CPU)))
    (group,) = client.SchedulingV1beta1Api(api).list_namespaced_pod_group(ns).items
    assert group.spec.scheduling_policy.gang.min_count == 2
    time.sleep(15)
    assert bound(api, ns, "whole") == [], "a gang pod was placed although the gang does not fit"
    lines, never = gang.explain(api, ns, kube.snapshot(api, ns, "whole"))
    say("with the gang: " + " ".join(lines))
    assert not never and len(lines) == 1
    assert f"gang {group.metadata.name} waits whole: 0 of 2 tasks placed (minCount 2)" in lines[0]
    assert "Missing: cpu" in lines[0] and "It starts by itself" in lines[0]
    assert "minCount (2) cannot be satisfied" in lines[0] or "Insufficient cpu" in lines[0], lines[0]

    # Room appears when the blocker ends (removed 3 s into the wait, so the waiter first sees the gang
    # waiting, as tf-cluster smoke shows it): the whole gang starts at once and trains to the end.
    removed: list[BaseException | None] = []

    def end_blocker():
        try:
            remove_now(api, ns, "blocker")
            removed.append(None)
        except BaseException as e:  # noqa: BLE001 - re-raised in the test's thread below
            removed.append(e)

    timer = threading.Timer(3, end_blocker)
    timer.start()
    said: list[str] = []
    snap = kube.wait_for_jobs(api, ns, "whole", timeout=600, say=lambda m: (said.append(m), say(m)))
    timer.join()
    if removed and removed[0] is not None:
        raise removed[0]
    all_complete(snap, api, ns, "whole")
    assert any("waits whole" in m for m in said), said  # the waiter explained the wait (tf-cluster smoke's)
    times = sorted(started_at(p) for p in pods_of(api, ns, "whole-tf-cluster-worker"))
    say(f"the gang's 2 workers were placed {times[-1] - times[0]:.1f}s apart")
    assert times[-1] - times[0] <= 5
    # Finished, the gang can no longer form whole: a finished task's agent lowered minCount to 1, so
    # that a task replaced now would be placed (test_a_task_replaced_after_another_finished_...)
    group = client.SchedulingV1beta1Api(api).read_namespaced_pod_group(group.metadata.name, ns)
    assert group.spec.scheduling_policy.gang.min_count == 1
    events = client.CoreV1Api(api).list_namespaced_event(ns).items
    relaxed = {e.involved_object.name for e in events if e.reason == "GangRelaxed"}
    assert relaxed and relaxed <= {p.metadata.name for p in pods_of(api, ns, "whole-tf-cluster-worker")}, relaxed
    # an upgrade that keeps the run keeps it (the chart reads the live PodGroup)
    install(ns, "whole", EX / "mwms-cpu.yaml", sets=(*QUICK, *sized(TASK_CPU)), verb="upgrade")
    group = client.SchedulingV1beta1Api(api).read_namespaced_pod_group(group.metadata.name, ns)
    assert group.spec.scheduling_policy.gang.min_count == 1, "helm upgrade of the same run set the gang whole again"


@pytest.mark.extended  # CI keeps the gang that starts whole once it fits (the faults took CI's minutes)
def test_two_gangs_that_do_not_fit_together_run_one_after_the_other(api, ns):
    # Each gang needs 2 x 0.3 of what is free: one fits, both do not; neither may start half.
    each = (free_cpu(api) * Decimal("0.3")).quantize(Decimal("0.01"))
    for name in ("first", "second"):
        install(ns, name, EX / "mwms-cpu.yaml", sets=(*QUICK, *sized(each)))
    for name in ("first", "second"):
        all_complete(wait(api, ns, name, timeout=900), api, ns, name)
    spans = {}
    for name in ("first", "second"):
        pods = pods_of(api, ns, f"{name}-tf-cluster-worker")
        placed = sorted(started_at(p) for p in pods)
        ended = min(p.status.container_statuses[0].state.terminated.finished_at.timestamp() for p in pods)
        assert placed[-1] - placed[0] <= 5, f"{name}: its workers were placed {placed[-1] - placed[0]:.1f}s apart"
        spans[name] = (placed[0], ended)
    (a_start, a_end), (b_start, b_end) = sorted(spans.values())
    shown = [(round(s - a_start, 1), round(e - a_start, 1)) for s, e in sorted(spans.values())]
    say(f"gang spans (placed, first pod done; s after the first placement): {shown}")
    assert b_start >= a_end - 1, "the second gang started before the first freed its CPUs"


def finished(api, ns, release: str) -> list:
    return [p for p in pods_of(api, ns, f"{release}-tf-cluster-worker") if p.status.phase in ("Succeeded", "Failed")]


def agent_pids(pod: str) -> list[int]:
    """The host pids of `pod`'s tf-cluster-agent (the node's containers are this machine's processes)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            if b"--agent" not in cmdline:
                continue
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"TF_CLUSTER_POD_NAME={pod}".encode() in environ:
            pids.append(int(entry))
    return pids


@pytest.mark.extended  # CI keeps the gang lowered once a run finished (test_a_gang_that_does_not_fit_...)
def test_a_task_replaced_after_another_finished_is_placed_and_ends_with_the_run(api, ns):
    """A finished pod counts no more toward the PodGroup's minCount: a ps replaced after the chief
    completed could never be placed, and its Job (and the release) waited forever. The chief's
    agent lowers minCount to 1 as its pod stops. Here the ps cannot learn the run's end (its agent
    frozen, as if its node had been cut off), is deleted once the chief is done, and its
    replacement is placed, reads that the run is over and exits 0: every Job completes."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    install(ns, "late", EX / "parameter-server.yaml", sets=("env[0].name=EPOCHS", "env[0].value=2"))
    (group,) = client.SchedulingV1beta1Api(api).list_namespaced_pod_group(ns).items
    assert group.spec.scheduling_policy.gang.min_count == 4
    deadline = time.monotonic() + 300
    while True:
        ps = [p for p in pods_of(api, ns, "late-tf-cluster-ps") if p.status.phase == "Running"]
        frozen = agent_pids(ps[0].metadata.name) if ps else []
        if frozen:
            break
        assert time.monotonic() < deadline, kube.diagnostics(api, ns, "late")
        time.sleep(1)
    for pid in frozen:
        os.kill(pid, signal.SIGSTOP)
    say(f"ps {ps[0].metadata.name}: its agent (pids {frozen}) frozen: it cannot learn that the run ended")

    def chief_done() -> bool:
        return any(p.status.phase == "Succeeded" for p in pods_of(api, ns, "late-tf-cluster-chief"))

    deadline = time.monotonic() + 600
    while not chief_done():
        assert time.monotonic() < deadline, kube.diagnostics(api, ns, "late")
        time.sleep(2)
    relaxed = time.monotonic() + 60
    while (
        client.SchedulingV1beta1Api(api)
        .read_namespaced_pod_group(group.metadata.name, ns)
        .spec.scheduling_policy.gang.min_count
        != 1
    ):
        assert time.monotonic() < relaxed, "the chief finished, and its agent did not lower the gang's minCount"
        time.sleep(1)
    (chief,) = [p for p in pods_of(api, ns, "late-tf-cluster-chief") if p.status.phase == "Succeeded"]
    reasons = {
        e.reason
        for e in core.list_namespaced_event(ns, field_selector=f"involvedObject.name={chief.metadata.name}").items
    }
    assert "GangRelaxed" in reasons, reasons
    say("the chief finished: the gang's minCount is 1 (its GangRelaxed Event)")

    core.delete_namespaced_pod(ps[0].metadata.name, ns, grace_period_seconds=0)
    t0 = time.monotonic()
    all_complete(wait(api, ns, "late", timeout=300), api, ns, "late")
    replaced = [p for p in pods_of(api, ns, "late-tf-cluster-ps") if p.metadata.name != ps[0].metadata.name]
    assert replaced and all(p.spec.node_name for p in replaced), [p.metadata.name for p in replaced]
    say(
        "the ps deleted after the chief finished: its replacement placed and the release complete "
        f"in {time.monotonic() - t0:.1f}s"
    )


@pytest.mark.extended  # CI keeps the gang scenarios; tests/bench/bench_gang.py measures this figure
@pytest.mark.parametrize("gang_on", [False, True], ids=["no-gang", "gang"])
def test_time_from_install_to_all_tasks_running_on_a_free_node(api, ns, gang_on):
    """The figure the docs state (install -> all tasks Running); the bench script repeats it."""
    t0 = time.monotonic()
    install(ns, "t", EX / "mwms-cpu.yaml", sets=(*QUICK, *sized(TASK_CPU), f"scheduling.gang={str(gang_on).lower()}"))
    deadline = t0 + 180
    while True:
        pods = pods_of(api, ns, "t-tf-cluster-worker")
        if len(pods) == 2 and all(p.status.phase == "Running" for p in pods):
            break
        assert time.monotonic() < deadline, kube.diagnostics(api, ns, "t")
        time.sleep(0.2)
    say(f"gang={gang_on}: helm install -> 2 tasks Running in {time.monotonic() - t0:.1f}s")
    joined = {bool(p.spec.scheduling_group) for p in pods}
    assert joined == {gang_on}
    assert helm_in(ns).uninstall("t", wait=True, timeout="2m").returncode == 0


@pytest.mark.extended  # CI keeps the waiter stating what is missing (test_a_gang_that_does_not_fit...)
def test_smoke_explains_a_gang_that_can_never_fit_and_stops(tmp_path):
    """`tf-cluster smoke` on a gang that needs more CPU than the node has at all: it says how much,
    what to change, and fails after the stuck grace (60 s) instead of waiting out --timeout."""
    import subprocess

    from test_cluster import KUBECONFIG

    from tf_cluster import ROOT

    argv = [
        str(ROOT / ".venv" / "bin" / "tf-cluster"),
        "smoke",
        "--kubeconfig",
        KUBECONFIG,
        "-f",
        str(EX / "mwms-cpu.yaml"),
    ]
    argv += ["--set", "roles.worker.resources.requests.cpu=3", "--set", "roles.worker.resources.limits.cpu=3"]
    argv += ["--set", "storage.checkpoints.type=emptyDir", "-n", "gang-never", "--timeout", "600", "--no-helm-test"]
    t0 = time.monotonic()
    r = subprocess.run(argv, capture_output=True, text=True, timeout=400)
    out = r.stdout + r.stderr
    say(
        f"smoke exited {r.returncode} after {time.monotonic() - t0:.0f}s; its explanation:\n"
        + "\n".join(ln for ln in out.splitlines() if "gang" in ln)[-1500:]
    )
    assert r.returncode != 0
    assert "0 of 2 tasks placed (minCount 2)" in out and "It can never start" in out
    assert "cpu 6 > 2" in out and "Lower roles.*.resources or replicas, or add nodes" in out


# The chart refuses these values (tf-cluster.validateGangAffinity); this shows on the real scheduler why
@pytest.mark.extended
def test_a_required_affinity_to_a_gang_pod_created_later_is_never_met_so_the_chart_refuses_it(api, ns, tmp_path):
    """The chief required beside worker 0, the gang on: installed from a copy of the chart without
    that one render-time rule, no pod of the release is placed (the scheduler tries the gang's pods
    in creation order, the chief first, and its term counts only pods placed before it); the chart
    itself refuses the values, naming the role and the term."""
    import shutil

    from kubernetes import client

    from tf_cluster import CHART

    term = {
        "labelSelector": {
            "matchLabels": {
                "app.kubernetes.io/instance": "buddy",
                "app.kubernetes.io/component": "worker",
                "batch.kubernetes.io/job-completion-index": "0",
            }
        },
        "topologyKey": "kubernetes.io/hostname",
    }
    values = tmp_path / "buddy.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                "scheduling": {"gang": True},
                "roles": {
                    "chief": {
                        "replicas": 1,
                        "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}},
                    },
                    "worker": {"replicas": 2},
                },
            }
        )
    )
    refused = helm_in(ns).render("buddy", helm.Values.of([EX / "mwms-cpu.yaml", values, SMALL]))
    assert refused.returncode != 0 and "roles.chief.affinity" in refused.stderr, refused.stderr
    unruled = tmp_path / "chart"
    shutil.copytree(CHART, unruled)
    rules = unruled / "templates" / "_validate.tpl"
    text = rules.read_text()
    assert '{{- include "tf-cluster.validateGangAffinity" . -}}\n' in text
    rules.write_text(text.replace('{{- include "tf-cluster.validateGangAffinity" . -}}\n', "", 1))
    r = helm_in(ns).install(
        "buddy", helm.Values.of([EX / "mwms-cpu.yaml", values, SMALL], set_string=QUICK), chart=unruled
    )
    assert r.returncode == 0, r.stderr
    # the other way round, which the chart renders: the workers required beside the chief, created first
    converse = tmp_path / "converse.yaml"
    chief = {
        "labelSelector": {
            "matchLabels": {"app.kubernetes.io/instance": "converse", "app.kubernetes.io/component": "chief"}
        }
    }
    worker = {"replicas": 2, "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {**chief, "topologyKey": "kubernetes.io/hostname"}]}}}  # fmt: skip
    converse.write_text(
        yaml.safe_dump({"scheduling": {"gang": True}, "roles": {"chief": {"replicas": 1}, "worker": worker}})
    )
    install(ns, "converse", EX / "mwms-cpu.yaml", converse, sets=QUICK)
    time.sleep(60)
    core = client.CoreV1Api(api)
    pods = {
        r: [p for p in core.list_namespaced_pod(ns).items if p.metadata.name.startswith(f"{r}-")]
        for r in ("buddy", "converse")
    }
    placed = {r: [p.metadata.name for p in ps if p.spec.node_name] for r, ps in pods.items()}
    events = core.list_namespaced_event(ns, field_selector="reason=FailedScheduling").items
    said = sorted({e.message for e in events if e.involved_object.name.startswith("buddy-tf-cluster-chief")})
    n = {r: f"{len(placed[r])} of {len(pods[r])}" for r in pods}
    say(f"60 s after install: the chief beside worker 0 (without the rule) placed {n['buddy']}, the chief's: "
        f"{said[:1]}; the workers beside the chief placed {n['converse']}")  # fmt: skip
    assert len(pods["buddy"]) == 3 and placed["buddy"] == [], placed
    assert any("pod affinity" in m for m in said), said
    assert len(pods["converse"]) == 3 and len(placed["converse"]) == 3, placed
