"""Many nodes: releases spread over the harness's three nodes (node/nodes.py), NetworkPolicy
across nodes, and a node that dies, is cut off or is drained mid-training.

The other nodes carry the NoSchedule taint node/config.EXTRA_NODE_TAINT (the single-node
scenarios stay on the first node); these releases tolerate it and spread one task per node
(a hard topology spread on the hostname). Checkpoints are on the default class `standard`:
local-path in shared-filesystem mode on a GlusterFS volume that every node mounts through its own
client, over its own link (hack/node/storage.py): a ReadWriteMany volume a cut-off node loses.

Expected outcomes (docs/user-guide/lost-nodes.md, the node rows) are asserted with their figures:
- a node lost mid-run (killed, or cut off): Kubernetes calls it NotReady after the
  controller manager's 50 s grace, evicts its pods after nodeLoss.tolerationSeconds (30 s),
  and their deletion deadline passes terminationGracePeriodSeconds later with no kubelet to
  confirm; the launchers of the other tasks then fence the stranded pod (mark it Failed), its
  Job replaces it on another node and training resumes from the checkpoint; when the lost task
  was the MultiWorkerMirrored leader, the survivors restart (on their own, or by their launchers
  once the leader's name answers with its replacement) and join the new one;
- a cut-off node that comes back stops the fenced pod at once (its kubelet finds it deleted):
  two live pods of one task exist only while the old one cannot reach anything;
- `kubectl drain`: evictions, not counted as failures; the tasks resume on the other nodes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from datetime import datetime
from pathlib import Path

import pytest
import yaml
from test_cluster import (
    EX,
    INDEX,
    JOB_NAME,
    KUBECONFIG,
    all_complete,
    epochs,
    install,
    launcher_events,
    log,
    pods_of,
    pv_path_of,
    say,
    tf_cluster_of,
    wait,
    wait_for_log,
)
from test_faults import model_exported, node_fault, on_the_harness_node

from tf_cluster import kube, progress
from tf_cluster.cluster_state import termination

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "hack"))  # the node harness, hack/node
from node import config as node_config  # noqa: E402

pytestmark = pytest.mark.needs(
    "the harness's three nodes",
    on_the_harness_node() and node_config.NODE_COUNT >= 3,
    "`make e2e` brings them up here (TF_CLUSTER_NODES=3) to spread tasks over and to kill, cut off and drain them",
)

NODES = [node_config.HOST_NODE.name] + [n.name for n in node_config.EXTRA_NODES]
LOST = node_config.EXTRA_NODES[-1]  # the node the faults take away (never the control plane's)
KUBECTL = node_config.ROOT / ".tools" / "bin" / "kubectl"
# the launchers' fence, the lost-node tolerations and the grace period of these releases (the bound)
GRACE_S, TOLERATION_S = 20, 30
SELF_FENCE_S = 90  # the self-fence's bound (its minimum): the fence waits it out after NotReady
NODE_MONITOR_GRACE_S = 50  # kube-controller-manager's default --node-monitor-grace-period (1.32+)


def spread(tmp_path: Path, release: str, **extra) -> Path:
    """Values: one task per node (hard spread on the hostname), the extra nodes' taint tolerated,
    a ReadWriteMany checkpoint claim."""
    values = {
        "roleDefaults": {
            "tolerations": [{"key": node_config.EXTRA_NODE_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
            "topologySpreadConstraints": [
                {
                    "maxSkew": 1,
                    "topologyKey": "kubernetes.io/hostname",
                    "whenUnsatisfiable": "DoNotSchedule",
                    # a lost, cordoned or drained node (tainted) no longer counts for the skew
                    "nodeTaintsPolicy": "Honor",
                    "labelSelector": {"matchLabels": {"app.kubernetes.io/instance": release}},
                }
            ],
        },
        "storage": {"checkpoints": {"type": "pvc", "size": "1Gi", "accessModes": ["ReadWriteMany"]}},
        "job": {"terminationGracePeriodSeconds": GRACE_S},
        "launcher": {"stopGraceSeconds": GRACE_S // 2},
        "nodeLoss": {"tolerationSeconds": TOLERATION_S, "fenceCheckSeconds": 5, "selfFenceSeconds": SELF_FENCE_S},
        "scheduling": {"singleNode": False},  # the examples put ReadWriteOnce claims on one node
        **extra,
    }
    path = tmp_path / f"{release}-spread.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def placement(api, ns: str, running: bool = False) -> dict[str, str]:
    """pod name -> node, for the release's training pods (with `running`, only the pods that run
    now: not an earlier incarnation of a task, ended on its node)."""
    return {
        p.metadata.name: p.spec.node_name
        for p in pods_of(api, ns, "-tf-cluster-")
        if p.spec.node_name and (not running or (p.status.phase == "Running" and not p.metadata.deletion_timestamp))
    }


def kubectl(*args: str, timeout: float = 300) -> str:
    r = subprocess.run(
        [str(KUBECTL), "--kubeconfig", KUBECONFIG, *args], capture_output=True, text=True, timeout=timeout
    )
    assert r.returncode == 0, f"kubectl {' '.join(args)}: {r.stderr}"
    return r.stdout


def node_ready(api, name: str) -> bool:
    from kubernetes import client

    node = client.CoreV1Api(api).read_node(name)
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])


def wait_until(check, what: str, timeout: float, every: float = 1.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def task_on(api, ns: str, release: str, node: str, epoch: int, role: str = "worker", timeout: float = 600) -> str:
    """The running `role` pod on `node` whose log has reached `epoch` (training is under way): the
    pod that trains now, not an earlier incarnation of its index (a task that failed at its start
    and was replaced leaves its first pod on the node, ended: a fault aimed at it hits nothing)."""

    def reached(text: str) -> bool:
        return progress.TaskProgress.of_log(text).progress.get("epoch", 0) >= epoch

    reached.__doc__ = f"epoch {epoch} or later"
    name = wait_for_log(api, ns, release, f"-{role}-", None, reached, timeout=timeout, node=node)
    pods = pods_of(api, ns, f"-{role}-")
    index = next(p.metadata.labels[INDEX] for p in pods if p.metadata.name == name)
    earlier = [
        f"{q.metadata.name} {q.status.phase} ({termination(q)})"
        for q in pods
        if q.metadata.labels[INDEX] == index and q.metadata.name != name
    ]
    if earlier:
        say(f"{role} {index} before {name}: {'; '.join(earlier)}")
    return name


def mwms_over_three_nodes(
    api, ns: str, tmp_path: Path, release: str, n_epochs: int, node: str, leader_on_it: bool = False, sets=()
) -> str:
    """MultiWorkerMirrored, one task per node (~9 s epochs); returns the task on `node` once it
    reported epoch 2 (the fault lands mid-run). Three workers (the node holds any of them), or,
    with `leader_on_it`, a chief (the coordination service's leader) on `node` and two workers on
    the others: the chief prefers `node` and the workers may not use it."""
    if leader_on_it:
        on_it = {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}
        roles = {
            # preferred, not required: its replacement must be placed elsewhere once `node` is lost
            "chief": {
                "replicas": 1,
                "affinity": {
                    "nodeAffinity": {
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {"weight": 100, "preference": {"matchExpressions": [on_it]}}
                        ]
                    }
                },
            },
            "worker": {
                "replicas": 2,
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [{"matchExpressions": [{**on_it, "operator": "NotIn"}]}]
                        }
                    }
                },
            },
        }
        values, replicas = spread(tmp_path, release, roles=roles), ()
    else:
        values, replicas = spread(tmp_path, release), ("roles.worker.replicas=3",)
    install(ns, release, EX / "mwms-cpu.yaml", values, sets=(*replicas, *epochs(n_epochs, 300), *sets))
    victim = task_on(api, ns, release, node, epoch=2, role="chief" if leader_on_it else "worker")
    failures_so_far(api, ns, release, victim)
    return victim


def failures_so_far(api, ns: str, release: str, victim: str) -> None:
    """Says the pods that failed before the fault, how each ended and its last log lines
    (`kube.diagnostics`; such a failure counts against its index's backoffLimitPerIndex), or that
    none did."""
    if any(p.status.phase == "Failed" for p in pods_of(api, ns, "-")):
        say(f"failed before the fault aimed at {victim}:\n{kube.diagnostics(api, ns, release, tail=6)}")
    else:
        say(f"no pod failed before the fault ({victim} is the one it aims at)")


def give_back(api, node) -> None:
    """A node taken away, given back (started again, joined, uncordoned, Ready)."""
    node_fault("heal", str(node.index))
    from node import nodes

    if not nodes.pids(node) or not node_ready(api, node.name):
        node_fault("start", str(node.index))
    subprocess.run([str(KUBECTL), "--kubeconfig", KUBECONFIG, "uncordon", node.name], capture_output=True)
    wait_until(lambda: node_ready(api, node.name), f"{node.name} Ready again", 180)


@pytest.fixture
def lost_node(api):
    """The node the test takes away, given back afterwards."""
    yield LOST.name
    give_back(api, LOST)


@pytest.fixture
def lost_nodes(api):
    """The extra nodes the test takes away (it appends them), given back afterwards."""
    taken: list = []
    yield taken
    for node in taken:
        give_back(api, node)


# ----------------------------------------------------------------- placement across nodes
@pytest.mark.parametrize(
    "example,replicas",
    [("mwms-cpu.yaml", {"worker": 3}), ("parameter-server.yaml", {"chief": 1, "worker": 2, "ps": 1})],
    ids=["multiWorkerMirrored", "parameterServer"],
)
def test_a_release_spread_over_three_nodes_trains_gang_placed_and_exports_its_model(
    api, ns, tmp_path, example, replicas
):
    release = "spread"
    sets = tuple(f"roles.{r}.replicas={n}" for r, n in replicas.items())
    install(ns, release, EX / example, spread(tmp_path, release), sets=(*sets, *epochs(3, 40)))
    # read while every task runs: a finished ParameterServer run's Jobs remove their servers' pods
    # (at once, since the servers watch the chief's Job), so the pods are kept as they were placed
    placed = wait_until(
        lambda: (
            (ps := [p for p in pods_of(api, ns, "-tf-cluster-") if p.spec.node_name])
            and len(ps) == sum(replicas.values())
            and ps
        ),
        "every task placed",
        300,
    )
    where = {p.metadata.name: p.spec.node_name for p in placed}
    snap = wait(api, ns, release, timeout=600)
    all_complete(snap, api, ns, release)
    say(f"placement: {where}")
    assert set(where.values()) == set(NODES), f"one task per node expected over {NODES}: {where}"
    model_exported(api, ns, release)
    pods = placed  # bound: their PodScheduled condition is set
    assert all(p.spec.scheduling_group for p in pods), "every task joins the release's PodGroup (the native gang)"
    bound = sorted(
        c.last_transition_time.timestamp() for p in pods for c in p.status.conditions if c.type == "PodScheduled"
    )
    say(f"the gang of {len(pods)} was bound to {len(set(where.values()))} nodes within {bound[-1] - bound[0]:.0f}s")
    assert bound[-1] - bound[0] <= 2, "the gang is bound all at once, not pod by pod"


# ----------------------------------------------------------------- shared storage
def on_shared(node, name: str, text: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """Through `node`'s own client (in its mount namespace): write `text` to the file `name` on the
    shared volume and flush it to the server, or (text None) read it."""
    in_ns = [] if node.host else ["nsenter", f"--mount={node.mntns}", "--"]
    path = node_config.SHARED / name
    script = 'printf %s "$1" > "$2" && sync "$2"' if text is not None else 'cat "$2"'
    argv = [*in_ns, "sh", "-c", script, "sh", text or "", str(path)]
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(argv, 124, "", f"no answer within {timeout:.0f}s")


def test_each_node_reaches_the_shared_volume_through_its_own_client_and_a_cut_off_node_loses_it(api, lost_node):
    """The claims' volume is GlusterFS, served from the first node: each node mounts it with a
    client of its own in its network namespace, in the mount namespace its kubelet and containerd
    use; what one node writes, the others read; a node cut off loses it (its writes fail) while the
    others keep it, and has it again once its link is back."""
    from node import proc, storage

    nodes = [node_config.HOST_NODE, *node_config.EXTRA_NODES]
    for node in nodes:
        pid = proc.pid_of(node.proc("glusterfs"))
        assert pid, f"no GlusterFS client of {node.name} running"
        assert storage.mounted(pid), f"{node.name}'s client has not mounted {storage.VOLUME} at {node_config.SHARED}"
        netns = "/proc/self/ns/net" if node.host else f"/run/netns/{node.netns}"
        assert os.stat(f"/proc/{pid}/ns/net").st_ino == os.stat(netns).st_ino, f"{node.name}'s client: not its network"
        if not node.host:
            mounts = {os.stat(f"/proc/{proc.pid_of(node.proc(c))}/ns/mnt").st_ino for c in ("kubelet", "containerd")}
            assert mounts == {os.stat(f"/proc/{pid}/ns/mnt").st_ino}, f"{node.name}: kubelet, containerd, client apart"
            assert mounts != {os.stat("/proc/self/ns/mnt").st_ino}, f"{node.name} shares this host's mounts"
    name = f"probe-{uuid.uuid4().hex[:8]}"
    token = uuid.uuid4().hex
    assert on_shared(LOST, name, token).returncode == 0
    for node in nodes:
        assert on_shared(node, name).stdout == token, f"{node.name} does not read what {LOST.name} wrote"
    node_fault("partition", str(LOST.index))
    t0 = time.monotonic()
    cut = on_shared(LOST, name, "cut off")
    lost_after = time.monotonic() - t0
    assert cut.returncode != 0, f"{LOST.name} wrote to the volume while cut off"
    assert on_shared(node_config.HOST_NODE, name).stdout == token, "the cut-off node's write reached the volume"
    kept = on_shared(node_config.EXTRA_NODES[0], name, "kept")
    assert kept.returncode == 0, f"{node_config.EXTRA_NODES[0].name} lost the volume with {LOST.name}: {kept.stderr}"
    node_fault("heal", str(LOST.index))
    t1 = time.monotonic()
    back = wait_until(
        lambda: on_shared(LOST, name, "back", timeout=20).returncode == 0, f"{LOST.name} writes again", 120
    )
    say(
        f"GlusterFS volume {storage.VOLUME}: {len(nodes)} clients, each in its node's network and mount namespace; "
        f"{LOST.name} cut off: its write failed after {lost_after:.0f}s ({(cut.stderr or '').strip()[:80]}), "
        f"the others kept the volume; it wrote again {time.monotonic() - t1:.0f}s after its link came back"
    )
    assert back and on_shared(node_config.HOST_NODE, name).stdout == "back"


def test_network_policy_admits_release_pods_and_drops_outsiders_across_nodes(api, ns, tmp_path):
    """A ParameterServer release serving, its ps on one node; probes from other nodes: a task of the
    release (admitted) and an outside pod (dropped by the destination node's Cilium agent)."""

    from kubernetes import client
    from test_security import PROBE, exec_in, probe_pod, running

    release = "netpol"
    install(ns, release, EX / "parameter-server.yaml", spread(tmp_path, release), sets=epochs(100000, 60))
    core = client.CoreV1Api(api)
    workers = [wait_for_log(api, ns, release, "-worker-", i, rf"serving worker:{i}") for i in ("0", "1")]
    wait_for_log(api, ns, release, "-ps-", "0", r"serving ps:0")
    where = placement(api, ns)
    (ps_pod,) = [p for p in where if "-ps-" in p]
    # four tasks on three nodes (skew 1): two share a node, but never both workers with the ps
    worker = next((w for w in workers if where[w] != where[ps_pod]), None)
    assert worker, f"both workers share the ps's node, against the spread: {where}"
    pod = core.read_namespaced_pod(worker, ns)
    (tf,) = [c for c in pod.spec.containers if c.name == "tensorflow"]
    ps_host, ps_port = tf_cluster_of(core, ns, tf)["ps"][0].rsplit(":", 1)
    elsewhere = next(n for n in NODES if n not in (where[ps_pod], where[worker]))
    probe_pod(api, ns, "outsider", tf.image, node=elsewhere)
    wait_until(lambda: running(api, ns, "outsider"), "the outside probe pod running", 120)
    inside = exec_in(ns, worker, PROBE, ps_host, ps_port, container="tensorflow")
    outside = exec_in(ns, "outsider", PROBE, ps_host, ps_port)
    say(
        f"ps on {where[ps_pod]}: release worker on {where[worker]} -> {inside}; outside pod on {elsewhere} -> {outside}"
    )
    assert inside == {"dns": True, "tcp": "open"}
    assert outside == {"dns": True, "tcp": "timeout"}, "the NetworkPolicy must drop an outside pod on another node"


# ----------------------------------------------------------------- a node lost mid-run
def lost_node_timeline(api, ns: str, victim: str, t_fault: float) -> dict[str, float]:
    """Seconds from the fault to: the node NotReady, the pod evicted, fenced (Failed), replaced
    (its index's next pod Running)."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    pod = core.read_namespaced_pod(victim, ns)
    node = core.read_node(pod.spec.node_name)
    ready = next(c for c in node.status.conditions if c.type == "Ready")
    evicted = next((c for c in pod.status.conditions or [] if c.type == "DisruptionTarget"), None)
    index = pod.metadata.labels[INDEX]
    job = pod.metadata.labels["batch.kubernetes.io/job-name"]
    later = [
        p
        for p in pods_of(api, ns, job)
        if p.metadata.labels[INDEX] == index
        and p.metadata.labels["batch.kubernetes.io/job-name"] == job
        and p.metadata.creation_timestamp > pod.metadata.creation_timestamp
    ]
    started = [
        cs.state.running.started_at.timestamp() if cs.state.running else cs.state.terminated.started_at.timestamp()
        for p in later
        for cs in p.status.container_statuses or []
        if cs.state.running or cs.state.terminated
    ]
    return {
        "NotReady": ready.last_transition_time.timestamp() - t_fault,
        "evicted": evicted.last_transition_time.timestamp() - t_fault if evicted else float("nan"),
        "replacement created": min(p.metadata.creation_timestamp.timestamp() for p in later) - t_fault
        if later
        else float("nan"),
        "replacement running": min(started) - t_fault if started else float("nan"),
    }


def log_times(text: str, t0: float) -> list[str]:
    """When (s after t0) a timestamped tensorflow log wrote its last epoch (a PROGRESS message), its
    result (RESULT, after model.save) and its last line: where a slow end sits."""
    stamped = []
    for line in text.strip().splitlines():
        stamp, _, rest = line.partition(" ")
        try:
            stamped.append((datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp(), progress.parse(rest)))
        except ValueError:
            continue
    marks = {"last epoch": "PROGRESS", "result": "RESULT", "last line": None}
    out = []
    for what, kind in marks.items():
        when = next((t for t, m in reversed(stamped) if kind is None or (m and m.kind == kind)), None)
        if when is not None:
            out.append(f"{what} {when - t0:.0f}")
    return out


def run_end(api, ns: str, release: str, t_fault: float) -> str:
    """How the run ended, in seconds after the fault: each pod that completed, its node, and when
    its containers finished (tensorflow's last epoch, result and last log line too); each Job's
    completion."""
    from kubernetes import client

    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    parts = []
    for p in sorted(pods_of(api, ns, f"{release}-tf-cluster-"), key=lambda p: p.metadata.name):
        if p.status.phase != "Succeeded":
            continue
        task = f"{p.metadata.labels['app.kubernetes.io/component']}:{p.metadata.labels[INDEX]}"
        ends = [
            f"{cs.name} {cs.state.terminated.finished_at.timestamp() - t_fault:.0f}"
            for cs in (p.status.init_container_statuses or []) + (p.status.container_statuses or [])
            if cs.state.terminated and cs.state.terminated.finished_at
        ]
        text = core.read_namespaced_pod_log(p.metadata.name, ns, container="tensorflow", timestamps=True)
        ends += log_times(text, t_fault)
        parts.append(f"{task} on {p.spec.node_name}: " + ", ".join(ends))
    for j in batch.list_namespaced_job(ns, label_selector=f"app.kubernetes.io/instance={release}").items:
        if j.status.completion_time:
            parts.append(f"Job {j.metadata.name} complete {j.status.completion_time.timestamp() - t_fault:.0f}")
    return "; ".join(parts)


def fence_lines(api, ns: str, lost: str) -> list[str]:
    """What the agents said they fenced (the pods on the lost node cannot be read): the fence runs in
    each pod's tf-cluster-agent sidecar, which holds the token."""
    return [
        line
        for p in pods_of(api, ns, "-tf-cluster-")
        if p.spec.node_name != lost and any(c.name == "tf-cluster-agent" for c in p.spec.init_containers or [])
        for line in log(api, ns, p.metadata.name, container="tf-cluster-agent").splitlines()
        if "fencing " in line
    ]


# The bound docs/user-guide/lost-nodes.md states for a lost node: NotReady after the node monitor's grace, then
# the later of the deletion deadline (evicted after the tolerations, the grace period after that)
# and the self-fence's bound, fenced within a check and its margin, and a replacement running
# within a minute of that (placement, image, TF start).
BOUND_S = NODE_MONITOR_GRACE_S + 10 + max(TOLERATION_S + GRACE_S, SELF_FENCE_S) + 10 + 5 + 60


# Both in `make check-all` (~5 min each): CI loses the MultiWorkerMirrored leader's node in the
# cut-off scenario below (its chief cut off from the control plane, its live pod self-fenced), which
# asserts what the kill asserts (fenced, said so, NodeLost, the survivors' restarts, resumed, the
# model) and more. The kill: every process and the link at once, with the chief on it; the
# partition: the node cut off from its peers too (its pods live on, unseen, and stop when it
# rejoins; any worker).
@pytest.mark.extended
@pytest.mark.parametrize("fault", ["kill", "partition"])
def test_a_node_lost_mid_run_is_fenced_and_training_resumes_on_the_others(api, ns, tmp_path, lost_node, fault):
    """MultiWorkerMirrored, one task per node; the third node dies (kill: every process and its
    link at once, with the chief on it: the leader whose coordination service every task uses) or
    is cut off (partition: its pods live on, unseen; three workers, any of them on it), at epoch 2."""
    from kubernetes import client

    release = "lost"
    leader_lost = fault == "kill"
    # 6 epochs: the fault lands at epoch 2, and the others cannot finish one more without the lost
    # task (every step is an all-reduce over the three), so the run outlasts the fence
    victim = mwms_over_three_nodes(api, ns, tmp_path, release, 6, lost_node, leader_on_it=leader_lost)
    t_fault, _, _ = node_fault(fault, str(LOST.index))
    core = client.CoreV1Api(api)
    fenced = wait_until(
        lambda: core.read_namespaced_pod(victim, ns).status.phase == "Failed",
        f"{victim} fenced (marked Failed) after {lost_node} was lost",
        BOUND_S,
        every=2,
    )
    t_fenced = time.time()
    assert fenced
    wait_until(
        lambda: lost_node_timeline(api, ns, victim, t_fault)["replacement running"] > 0, "the replacement running", 120
    )
    # read before the node may come back: its kubelet then removes the fenced pod
    timeline = lost_node_timeline(api, ns, victim, t_fault)
    victim_pod = core.read_namespaced_pod(victim, ns)
    role, victim_job = victim_pod.metadata.labels["app.kubernetes.io/component"], victim_pod.metadata.labels[JOB_NAME]
    if fault == "partition":
        # two live pods of worker <index> for as long as the old one is cut off, never after:
        # the node comes back and its kubelet stops the fenced pod
        from node import nodes

        cid = next(
            (cs.container_id for cs in core.read_namespaced_pod(victim, ns).status.container_statuses or []), None
        )
        assert cid, f"{victim} had a container on {lost_node}"
        cid = cid.split("://")[-1]

        def old_task_running() -> bool:
            tasks = nodes.ctr("tasks", "list", check=False, sock=LOST.sock).stdout
            return any(line.startswith(cid) and "RUNNING" in line for line in tasks.splitlines())

        alive = old_task_running()
        say(f"while cut off, the fenced pod's container on {lost_node} is {'RUNNING' if alive else 'already exited'}")
        node_fault("heal", str(LOST.index))
        t_heal = time.time()
        wait_until(lambda: not old_task_running(), f"the fenced pod's container stopped on {lost_node}", 90)
        say(f"the cut-off pod's container stopped {time.time() - t_heal:.1f}s after {lost_node} rejoined")
    snap = wait(api, ns, release, timeout=900)
    all_complete(snap, api, ns, release)
    timeline["fenced"] = t_fenced - t_fault
    timeline["complete"] = time.time() - t_fault
    say("lost node timeline (s after the fault): " + ", ".join(f"{k} {v:.0f}" for k, v in timeline.items()))
    say(f"how the run ended (s after the fault): {run_end(api, ns, release, t_fault)}")
    assert timeline["replacement running"] <= BOUND_S, f"recovery took longer than the stated bound {BOUND_S}s"
    fence_said(api, ns, victim_pod, lost_node)
    job = snap.jobs[victim_job]
    replacement = [
        p
        for p in pods_of(api, ns, victim_job)
        if p.metadata.labels[INDEX] == victim_pod.metadata.labels[INDEX] and p.status.phase == "Succeeded"
    ]
    assert replacement and replacement[0].spec.node_name != lost_node
    resumed = progress.TaskProgress.of_log(log(api, ns, replacement[0].metadata.name)).resumed_at()
    say(
        f"{role} {victim_pod.metadata.labels[INDEX]} resumed at epoch {resumed[-1] if resumed else None} on "
        f"{replacement[0].spec.node_name}; Job failures counted: {job.status.failed or 0} "
        f"(backoffLimitPerIndex {job.spec.backoff_limit_per_index})"
    )
    assert resumed and resumed[-1] >= 2, "training resumes from the checkpoint, not from epoch 0"
    if leader_lost:
        survivors_restarted(api, ns)
    model_exported(api, ns, release)


def fence_said(api, ns: str, victim_pod, lost_node: str) -> None:
    """A launcher said it fenced the lost node's pod, in its log and in a FencedPeer Event, and the
    pod reads NodeLost."""
    victim = victim_pod.metadata.name
    lines = fence_lines(api, ns, lost_node)
    assert any(victim in line for line in lines), f"no launcher said it fenced {victim}: {lines}"
    fenced_events = [
        m for reasons in launcher_events(api, ns).values() for r, m in reasons.items() if r == "FencedPeer"
    ]
    assert any(victim in m for m in fenced_events), f"no FencedPeer Event names {victim}: {fenced_events}"
    assert victim_pod.status.reason == "NodeLost", victim_pod.status


def survivors_restarted(api, ns: str, self_fenced: bool = False) -> None:
    """The MultiWorkerMirrored leader was lost: the survivors cannot go on with a new leader. Either
    their TensorFlow notices the lost one (its coordination service's heartbeat times out: exit 1, a
    failure their Job counts), or, when it waits on the vanished machine with no error (measured:
    850 s without a step), their launchers see the leader's name answer with its replacement's
    address and restart them (exit 6, which their Job retries without counting). A survivor's
    replacement that started while the old leader was still published never reached it (no open
    connection to it): its channel finds the new one, no restart. Both workers restarted, for these
    reasons only (and, when the leader stopped itself, `self_fenced`, TensorFlow's preemption
    save)."""
    workers = sorted(pods_of(api, ns, "-worker-"), key=lambda p: p.metadata.creation_timestamp)
    ends: dict[str, list[str]] = {}
    for p in (p for p in workers if p.status.phase == "Failed"):
        (cs,) = [c for c in p.status.container_statuses if c.name == "tensorflow"]
        text, code = log(api, ns, p.metadata.name), cs.state.terminated.exit_code
        why = {
            "launcher (exit 6)": code == 6 and "the coordination leader" in text and "was replaced" in text,
            "TensorFlow (exit 1)": code == 1 and "CoordinationService" in text,
            # a leader stopped by its self-fence (SIGTERM) first has every task save and exit 42
            "TensorFlow's preemption save (exit 42)": code == 42 and self_fenced,
        }
        assert any(why.values()), f"{p.metadata.name} exit {code}: {text[-2000:]}"
        ends.setdefault(p.metadata.labels[INDEX], []).append(next(k for k, v in why.items() if v))
    say(f"the survivors restarted after the leader was lost, by: {ends}")
    assert sorted(ends) == ["0", "1"], ends


def fenced_and_replaced(api, ns: str, victims: tuple[str, ...], node: str, t_fault: float) -> float:
    """Wait until every victim is fenced (Failed) and each one's replacement runs; returns the
    seconds from the fault to the fence."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    wait_until(
        lambda: all(core.read_namespaced_pod(v, ns).status.phase == "Failed" for v in victims),
        f"{', '.join(victims)} fenced after {node} was lost",
        BOUND_S,
        every=2,
    )
    t_fenced = time.time() - t_fault
    wait_until(
        lambda: all(lost_node_timeline(api, ns, v, t_fault)["replacement running"] > 0 for v in victims),
        "the replacements running",
        120,
    )
    return t_fenced


def fencers_on_one_node(tmp_path: Path, release: str) -> Path:
    """Values with no spread at all, placing both fencers of a chief and two workers (the chief and
    worker 0) on one extra node: the workers one per node, preferring the extra nodes, and the
    chief on worker 0's node (required: its replacement follows worker 0's)."""
    mine = {"app.kubernetes.io/instance": release, "app.kubernetes.io/component": "worker"}
    on_host = {"key": "kubernetes.io/hostname", "topologyKey": "kubernetes.io/hostname"}
    prefer = [
        {
            "weight": w,
            "preference": {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [n]}]},
        }
        for w, n in ((100, LOST.name), (50, node_config.EXTRA_NODES[0].name))
    ]
    roles = {
        "chief": {
            "replicas": 1,
            "affinity": {
                "podAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "labelSelector": {"matchLabels": {**mine, "batch.kubernetes.io/job-completion-index": "0"}},
                            "topologyKey": on_host["topologyKey"],
                        }
                    ]
                }
            },
        },
        "worker": {
            "replicas": 2,
            "affinity": {
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {"labelSelector": {"matchLabels": mine}, "topologyKey": on_host["topologyKey"]}
                    ]
                },
                "nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": prefer},
            },
        },
    }
    tolerate = [{"key": node_config.EXTRA_NODE_TAINT, "operator": "Exists", "effect": "NoSchedule"}]
    # no gang: its pods wait at the scheduler's Permit until all are placed, and the chief's pod
    # affinity does not see a waiting worker 0 (measured: "didn't match pod affinity rules" for 600 s)
    scheduling = {"singleNode": False, "gang": False}
    return spread(tmp_path, release, roles=roles, roleDefaults={"tolerations": tolerate}, scheduling=scheduling)


# CI loses the MultiWorkerMirrored leader's node with a fencer left (the cut-off scenario below; the
# [kill] above is `make check-all`'s); this one, both fencers lost with it, runs in `make check-all` (~6 min)
@pytest.mark.extended
def test_both_fencers_node_lost_without_any_spread_a_task_on_another_node_fences_them(api, ns, tmp_path, lost_nodes):
    """Issue 43: the fencers (the chief and worker 0 of a MultiWorkerMirrored release) share a node,
    with no spread in the values; a fencer asks worker 1, on another node, to fence too (a
    condition on its pod). The node is killed at epoch 2: worker 1 (or its next pod, when its
    TensorFlow fails with the lost leader) fences both, their Jobs replace them, the run completes."""
    from kubernetes import client

    release = "fencers"
    install(ns, release, EX / "mwms-cpu.yaml", fencers_on_one_node(tmp_path, release), sets=epochs(6, 300))
    wait_for_log(
        api, ns, release, "-chief-", "0", lambda t: progress.TaskProgress.of_log(t).progress.get("epoch", 0) >= 2
    )
    core = client.CoreV1Api(api)
    pods = {p.metadata.name: p for p in pods_of(api, ns, "-tf-cluster-") if p.status.phase == "Running"}
    task = {(p.metadata.labels["app.kubernetes.io/component"], p.metadata.labels[INDEX]): n for n, p in pods.items()}
    chief, worker0, worker1 = task[("chief", "0")], task[("worker", "0")], task[("worker", "1")]
    node = pods[chief].spec.node_name
    say(f"placed: {chief} and {worker0} on {node}, {worker1} on {pods[worker1].spec.node_name}")
    assert pods[worker0].spec.node_name == node != pods[worker1].spec.node_name
    lost = next(n for n in node_config.EXTRA_NODES if n.name == node)

    def asked(name: str) -> bool:
        return any(
            c.type == "tf-cluster.io/Fencer" and c.status == "True"
            for c in core.read_namespaced_pod(name, ns).status.conditions or []
        )

    wait_until(lambda: asked(worker1), f"{worker1} asked to fence (every fencer on {node})", 60)
    lost_nodes.append(lost)
    t_fault, _, _ = node_fault("kill", str(lost.index))
    t_fenced = fenced_and_replaced(api, ns, (chief, worker0), node, t_fault)
    timeline = lost_node_timeline(api, ns, chief, t_fault)
    snap = wait(api, ns, release, timeout=900)
    all_complete(snap, api, ns, release)
    timeline.update({"fenced": t_fenced, "complete": time.time() - t_fault})
    say("both fencers' node timeline (s after the kill): " + ", ".join(f"{k} {v:.0f}" for k, v in timeline.items()))
    # what worker 1's pods' agents said (the first, asked; or its next, which inherits the request)
    said = [
        (p.metadata.name, line)
        for p in pods_of(api, ns, "-worker-")
        if p.metadata.labels[INDEX] == "1"
        for line in log(api, ns, p.metadata.name, container="tf-cluster-agent").splitlines()
        if "fencing " in line
    ]
    say("worker 1's agents: " + "; ".join(f"{name[-5:]}: {line[:120]}" for name, line in said))
    assert any("fencing too, as a fencer asked" in line for _, line in said), said
    for victim in (chief, worker0):
        assert any(f"fencing {victim}" in line for _, line in said), f"worker 1 did not fence {victim}: {said}"
        assert core.read_namespaced_pod(victim, ns).status.reason == "NodeLost"
    events = [m for reasons in launcher_events(api, ns).values() for r, m in reasons.items() if r == "AskedToFence"]
    assert any(worker1 in m for m in events), f"no AskedToFence Event names {worker1}: {events}"
    assert timeline["replacement running"] <= BOUND_S, f"recovery took longer than the stated bound {BOUND_S}s"
    model_exported(api, ns, release)


WRITERS_LOG = ("env[2].name=WRITERS_LOG", "env[2].value=writers")  # common.WritersLog, on the claim


def writers(api, ns: str, release: str) -> dict[str, list[tuple[float, float, str]]]:
    """task -> [(first, last write, pod)] of each incarnation that trained, in time order, from the
    lines every task appended to the shared claim while it trained (WRITERS_LOG: a file per pod)."""
    import json

    folder = pv_path_of(api, ns, f"{release}-tf-cluster-checkpoints") / "checkpoints" / "writers"
    files = sorted(folder.glob("*.jsonl"))
    assert files, f"no task wrote to {folder}"
    spans: dict[str, dict[str, list[float]]] = {}
    for line in (ln for f in files for ln in f.read_text().splitlines()):
        w = json.loads(line)
        span = spans.setdefault(w["task"], {}).setdefault(w["pod"], [w["t"], w["t"]])
        span[0], span[1] = min(span[0], w["t"]), max(span[1], w["t"])
    return {task: sorted((a, b, pod) for pod, (a, b) in pods.items()) for task, pods in spans.items()}


def test_a_node_cut_off_from_the_control_plane_stops_its_task_before_the_fence_replaces_it(
    api, ns, tmp_path, lost_node
):
    """Issue 43, split brain: the MultiWorkerMirrored chief's node loses the control plane alone at
    epoch 2 (its kubelet and agents cannot reach the API server; its pods still reach the workers
    and the shared claim). The chief trains on, unseen, until its self-fence stops it
    (nodeLoss.selfFenceSeconds after the API server's last answer); the fence waits that bound out
    after the node went NotReady before it marks the pod Failed, and the replacement starts on
    another node. From the claim itself: no two incarnations of one task ever wrote at once."""
    from kubernetes import client
    from node import nodes

    release = "cutoff"
    # The chief trains on, cut off at epoch 2, until its self-fence: 55-93 s after the cut in CI, at
    # most ~140 s (the bound asserted below). 30 epochs leave 28 after the cut, ~250 s at the
    # fastest pace (~9 s an epoch on an idle node; ~26 s beside the other lane): it cannot finish
    # first. Every task resumes from the save its self-fence made (TensorFlow's preemption save)
    # and trains 2 more epochs whatever the pace (EPOCHS_AFTER_RESUME): with 18 epochs and no such
    # end, the replacement trained 14 epochs after it resumed in a cold CI run (752 s for this test).
    total = 30
    sets = (*WRITERS_LOG, "env[3].name=EPOCHS_AFTER_RESUME", "env[3].value=2")
    victim = mwms_over_three_nodes(api, ns, tmp_path, release, total, lost_node, leader_on_it=True, sets=sets)
    core = client.CoreV1Api(api)
    cid = next(
        cs.container_id
        for cs in core.read_namespaced_pod(victim, ns).status.container_statuses or []
        if cs.name == "tensorflow"
    )
    cid = cid.split("://")[-1]

    def chief_running() -> bool | None:
        """Is the chief's container running on the isolated node (None: containerd did not answer)?"""
        listed = nodes.ctr("tasks", "list", check=False, sock=LOST.sock)
        if listed.returncode != 0:
            return None
        return any(line.startswith(cid) and "RUNNING" in line for line in listed.stdout.splitlines())

    assert chief_running(), f"{victim}'s tensorflow container {cid[:12]} not running on {lost_node} before the cut"
    t_fault, _, _ = node_fault("isolate", str(LOST.index))
    t_stopped = None
    deadline = time.time() + BOUND_S
    while time.time() < deadline:  # the chief's container on the isolated node, and the fence
        if t_stopped is None and chief_running() is False:
            t_stopped = time.time()
            say(f"the cut-off chief's container stopped by itself {t_stopped - t_fault:.0f}s after the cut")
        if core.read_namespaced_pod(victim, ns).status.phase == "Failed":
            break
        time.sleep(2)
    t_fenced = time.time()
    assert core.read_namespaced_pod(victim, ns).status.phase == "Failed", f"{victim} not fenced within {BOUND_S}s"
    assert t_stopped is not None, "the cut-off chief still trained when the fence replaced it: two chiefs"
    # its replacement starts on another node while this one is still cut off
    wait_until(
        lambda: lost_node_timeline(api, ns, victim, t_fault)["replacement running"] > 0,
        "the chief's replacement running",
        120,
        every=2,
    )
    timeline = lost_node_timeline(api, ns, victim, t_fault)
    timeline.update({"self-fenced": t_stopped - t_fault, "fenced": t_fenced - t_fault})
    victim_pod = core.read_namespaced_pod(victim, ns)  # before the node rejoins: its kubelet removes it then
    node_fault("heal", str(LOST.index))
    snap = wait(api, ns, release, timeout=900)
    all_complete(snap, api, ns, release)
    timeline["complete"] = time.time() - t_fault
    say("cut-off node timeline (s after the cut): " + ", ".join(f"{k} {v:.0f}" for k, v in timeline.items()))
    say(f"how the run ended (s after the fault): {run_end(api, ns, release, t_fault)}")
    # its self-fence: the bound after its last proof of being heard (an answer, or a watch line
    # counted the stop's margin earlier), which came no later than the cut, plus the agent's
    # check (5 s), the stop grace and 10 s; a quarter of the bound more, as a margin
    assert timeline["self-fenced"] <= SELF_FENCE_S + SELF_FENCE_S // 4 + 5 + GRACE_S // 2 + 10, timeline
    assert timeline["replacement running"] <= BOUND_S, f"recovery took longer than the stated bound {BOUND_S}s"
    fence_said(api, ns, victim_pod, lost_node)
    survivors_restarted(api, ns, self_fenced=True)
    spans = writers(api, ns, release)
    say(
        "writers (s after the cut): "
        + "; ".join(
            f"{task}: " + ", ".join(f"{pod[-5:]} {a - t_fault:.0f}..{b - t_fault:.0f}" for a, b, pod in s)
            for task, s in sorted(spans.items())
        )
    )
    for task, s in spans.items():  # one writer per task at every moment
        for (_, b0, p0), (a1, _, p1) in zip(s, s[1:], strict=False):
            assert b0 < a1, f"{task}: {p0} wrote until {b0 - t_fault:.0f}s, {p1} from {a1 - t_fault:.0f}s"
    old_chief = [b for a, b, pod in spans["chief:0"] if pod == victim]
    assert old_chief and old_chief[0] < t_fenced, "the cut-off chief wrote after the fence"
    assert len(spans["chief:0"]) >= 2, "the chief's replacement trained"
    chief_done = progress.TaskProgress.of_log(
        log(api, ns, next(p.metadata.name for p in pods_of(api, ns, "-chief-") if p.status.phase == "Succeeded"))
    )
    resumed = chief_done.resumed_at()
    # none: the cut-off chief finished (its backup is removed at the end) before its self-fence,
    # so this run is too short for this machine's pace
    assert resumed and 2 <= resumed[-1] < total, (
        f"training resumes from the checkpoint, not from epoch 0 (resumed at {resumed}; {total} epochs: "
        f"none means the cut-off chief finished before its self-fence stopped it)"
    )
    ended = chief_done.progress.get("epoch")
    assert ended == resumed[-1] + 2, f"EPOCHS_AFTER_RESUME=2: resumed in epoch {resumed[-1]}, ended at {ended}"
    model_exported(api, ns, release)


# CI covers an eviction not counted (test_faults: test_an_evicted_pod_is_replaced_without_using_the_backoff_budget)
# and a task moving to another node and resuming (the lost-node tests here)
@pytest.mark.extended
def test_draining_a_node_moves_its_tasks_and_training_resumes_without_counting_failures(api, ns, tmp_path, lost_node):
    """`kubectl drain` of a node running tasks (an upgrade, a scale-down): its pods are evicted
    (DisruptionTarget: ignored by the Jobs' podFailurePolicy), replaced on the other nodes."""
    release = "drain"
    victim = mwms_over_three_nodes(api, ns, tmp_path, release, 10, lost_node)
    on_node = [p for p, n in placement(api, ns).items() if n == lost_node]
    # the evicted pod is deleted: its index is read now
    index = next(p.metadata.labels[INDEX] for p in pods_of(api, ns, "-worker-") if p.metadata.name == victim)
    t0 = time.time()
    # the release's pods only: other tests' leftovers on the node are not this test's concern
    selector = f"--pod-selector=app.kubernetes.io/instance={release}"
    kubectl(
        "drain", lost_node, selector, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=180s", timeout=240
    )
    say(f"drained {lost_node} ({len(on_node)} task(s): {on_node}) in {time.time() - t0:.0f}s")
    snap = wait(api, ns, release, timeout=900)
    all_complete(snap, api, ns, release)
    moved = [p for p in pods_of(api, ns, "-worker-") if p.status.phase == "Succeeded"]
    assert all(p.spec.node_name != lost_node for p in moved)
    (replacement,) = [p for p in moved if p.metadata.labels[INDEX] == index]
    counts = {k.rsplit("/", 1)[1]: v for k, v in replacement.metadata.annotations.items() if "failure-count" in k}
    say(f"worker {index} replaced after the drain: {counts}")
    # the eviction is not a failure of that task (podFailurePolicy: DisruptionTarget -> Ignore)
    assert counts.get("job-index-failure-count", "0") == "0" and counts.get("job-index-ignored-failure-count") >= "1"
    resumed = progress.TaskProgress.of_log(log(api, ns, replacement.metadata.name)).resumed_at()
    done = time.time() - t0
    say(f"worker {index} resumed at epoch {resumed[-1] if resumed else None}; done {done:.0f}s after the drain")
    assert resumed and resumed[-1] >= 2


# CI covers the fence on a lost node under MultiWorkerMirrored (the cut-off scenario below) and a lost
# ParameterServer worker tolerated by the coordinator (test_cluster: a deleted ParameterServer worker)
@pytest.mark.extended
def test_a_parameter_server_worker_node_killed_mid_run_is_fenced_and_the_coordinator_reconnects(
    api, ns, tmp_path, lost_node
):
    """ParameterServer: the chief and the ps on the first node, one worker on each other node; the
    third node dies at epoch 2. The fence lets the worker's Job replace it; the coordinator's
    launcher restarts it so it reconnects; the run completes with its model."""
    from kubernetes import client

    release = "lostps"
    first = {"kubernetes.io/hostname": node_config.HOST_NODE.name}
    not_first = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": "kubernetes.io/hostname",
                                "operator": "NotIn",
                                "values": [first["kubernetes.io/hostname"]],
                            }
                        ]
                    }
                ]
            }
        }
    }
    roles = {
        "chief": {"nodeSelector": first},
        "ps": {"nodeSelector": first},
        "worker": {"replicas": 2, "affinity": not_first},
    }
    install(ns, release, EX / "parameter-server.yaml", spread(tmp_path, release, roles=roles), sets=epochs(12, 60))
    wait_for_log(
        api, ns, release, "-chief-", "0", lambda t: progress.TaskProgress.of_log(t).progress.get("epoch", 0) >= 2
    )
    where = placement(api, ns, running=True)
    (victim,) = [p for p, n in where.items() if n == lost_node and "-worker-" in p]
    t_fault, _, _ = node_fault("kill", str(LOST.index))
    core = client.CoreV1Api(api)
    wait_until(
        lambda: core.read_namespaced_pod(victim, ns).status.phase == "Failed", f"{victim} fenced", BOUND_S, every=2
    )
    t_fenced = time.time() - t_fault
    wait_until(
        lambda: lost_node_timeline(api, ns, victim, t_fault)["replacement running"] > 0, "the replacement running", 120
    )
    timeline = lost_node_timeline(api, ns, victim, t_fault)  # before the run ends (its Job then removes it)
    timeline["fenced"] = t_fenced
    assert core.read_namespaced_pod(victim, ns).status.reason == "NodeLost"
    snap = wait(api, ns, release, timeout=900)
    all_complete(snap, api, ns, release)
    say("lost node timeline (s after the fault): " + ", ".join(f"{k} {v:.0f}" for k, v in timeline.items()))
    say(f"how the run ended (s after the fault): {run_end(api, ns, release, t_fault)}")
    chief_job = next(j for name, j in snap.jobs.items() if "-chief-" in name)
    # TensorFlow's coordinator waits on a vanished worker's RPCs with no error (measured: stuck at
    # its epoch for 5+ minutes); its launcher restarts it once the worker is fenced (exit 6, ignored
    # by the chief Job's podFailurePolicy: no retry spent), and it resumes from its checkpoint with
    # the replacement
    chiefs = sorted(pods_of(api, ns, "-chief-"), key=lambda p: p.metadata.creation_timestamp)
    first = log(api, ns, chiefs[0].metadata.name)
    assert "restarting the coordinator" in first and victim in first, first[-2000:]
    resumed = progress.TaskProgress.of_log(log(api, ns, chiefs[-1].metadata.name)).resumed_at()
    notes = chiefs[-1].metadata.annotations or {}
    say(
        f"the coordinator restarted once ({chief_job.status.failed or 0} failure counted, "
        f"{notes.get('batch.kubernetes.io/job-index-ignored-failure-count')} ignored); resumed at epoch {resumed}"
    )
    assert (chief_job.status.failed or 0) == 0 and len(chiefs) == 2
    assert notes.get("batch.kubernetes.io/job-index-ignored-failure-count") == "1", notes
    assert timeline["replacement running"] <= BOUND_S
    model_exported(api, ns, release)


# CI covers the leader's node lost under MultiWorkerMirrored (the cut-off scenario above); this one runs
# in `make check-all`
@pytest.mark.extended
def test_a_parameter_server_chief_and_ps_node_killed_mid_run_both_are_replaced_and_the_run_resumes(
    api, ns, tmp_path, lost_node
):
    """ParameterServer: the chief (the coordinator) and the ps on the third node, the two workers
    on the others, no spread in the values; that node dies at epoch 2. Worker 0, a fencer on
    another node, fences both; their Jobs replace them elsewhere; the new coordinator restores
    the model from its checkpoint into the new ps and the run completes."""
    from kubernetes import client

    release = "lostchief"
    on_it = {"key": "kubernetes.io/hostname", "operator": "In", "values": [lost_node]}
    # preferred, not required: their replacements must be placed elsewhere once the node is lost
    there = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "preference": {"matchExpressions": [on_it]}}
            ]
        }
    }
    elsewhere = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{**on_it, "operator": "NotIn"}]}]
            }
        }
    }
    roles = {"chief": {"affinity": there}, "ps": {"affinity": there}, "worker": {"replicas": 2, "affinity": elsewhere}}
    tolerate = [{"key": node_config.EXTRA_NODE_TAINT, "operator": "Exists", "effect": "NoSchedule"}]
    values = spread(tmp_path, release, roles=roles, roleDefaults={"tolerations": tolerate})
    install(ns, release, EX / "parameter-server.yaml", values, sets=epochs(12, 60))
    wait_for_log(
        api, ns, release, "-chief-", "0", lambda t: progress.TaskProgress.of_log(t).progress.get("epoch", 0) >= 2
    )
    where = placement(api, ns, running=True)
    chief = next(p for p in where if "-chief-" in p)
    ps = next(p for p in where if "-ps-" in p)
    say(f"placed: {where}")
    assert where[chief] == where[ps] == lost_node, where
    t_fault, _, _ = node_fault("kill", str(LOST.index))
    core = client.CoreV1Api(api)
    t_fenced = fenced_and_replaced(api, ns, (chief, ps), lost_node, t_fault)
    timeline = {f"chief {k}": v for k, v in lost_node_timeline(api, ns, chief, t_fault).items()}
    timeline["ps replacement running"] = lost_node_timeline(api, ns, ps, t_fault)["replacement running"]
    lines = fence_lines(api, ns, lost_node)
    snap = wait(api, ns, release, timeout=900)
    all_complete(snap, api, ns, release)
    timeline.update({"fenced": t_fenced, "complete": time.time() - t_fault})
    say("chief and ps node timeline (s after the kill): " + ", ".join(f"{k} {v:.0f}" for k, v in timeline.items()))
    for victim in (chief, ps):
        assert any(f"fencing {victim}" in line for line in lines), f"no agent said it fenced {victim}: {lines}"
        assert core.read_namespaced_pod(victim, ns).status.reason == "NodeLost"
    chiefs = sorted(pods_of(api, ns, "-chief-"), key=lambda p: p.metadata.creation_timestamp)
    assert chiefs[-1].spec.node_name != lost_node
    resumed = progress.TaskProgress.of_log(log(api, ns, chiefs[-1].metadata.name)).resumed_at()
    chief_job = next(j for name, j in snap.jobs.items() if "-chief-" in name)
    say(f"the coordinator resumed at epoch {resumed}; chief Job failures counted: {chief_job.status.failed or 0}")
    assert resumed and resumed[-1] >= 2, "the coordinator resumes from its checkpoint, not from epoch 0"
    assert max(timeline["chief replacement running"], timeline["ps replacement running"]) <= BOUND_S
    model_exported(api, ns, release)
