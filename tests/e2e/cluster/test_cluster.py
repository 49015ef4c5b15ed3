"""The chart's claims on a real Kubernetes node: real kubelet, containerd, cluster DNS,
storage and the trainer image running real TensorFlow.

Each scenario installs a values example (with small CPU requests: one 2-core node),
waits on Job conditions by type, and checks what only a cluster can show.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tf_cluster import ROOT, cluster_state, helm, kube, progress
from tf_cluster.errors import RunError

SMALL = Path(__file__).with_name("values-small-node.yaml")
EX = ROOT / "values-examples"
KUBECONFIG = os.environ.get("TF_CLUSTER_E2E_KUBECONFIG", "")
JOB_NAME = cluster_state.JOB_NAME_LABEL
INDEX = cluster_state.INDEX_LABEL


def say(msg: str) -> None:
    print(f"[e2e] {msg}", flush=True)


def helm_in(ns: str, major: str = "4") -> helm.Helm:
    return helm.Helm(major, kubeconfig=KUBECONFIG, namespace=ns)


def install(ns: str, release: str, *files: Path, sets: tuple[str, ...] = (), major: str = "4", verb="install"):
    values = helm.Values.of(
        (*files, SMALL),  # env values are strings: --set-string keeps "4" from becoming a number
        set=[s for s in sets if not s.startswith("env[")],
        set_string=[s for s in sets if s.startswith("env[")],
    )
    r = getattr(helm_in(ns, major), verb)(release, values)
    assert r.returncode == 0, r.stderr


def epochs(n: int, steps: int) -> tuple[str, ...]:
    """--set-string pairs for the example trainers' run length."""
    return ("env[0].name=EPOCHS", f"env[0].value={n}", "env[1].name=STEPS_PER_EPOCH", f"env[1].value={steps}")


def smoke(ns: str, release: str, *args) -> subprocess.CompletedProcess:
    """`tf-cluster smoke` as a user runs it, on the e2e cluster (small requests), the release kept."""
    argv = [sys.executable, "-m", "tf_cluster.cli", "smoke", *args, "-f", SMALL]
    argv += ["--kubeconfig", KUBECONFIG, "-n", ns, "--release", release, "--keep"]
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True)


def reported(api, ns, pod_name: str) -> progress.TaskProgress:
    """What a pod reported through the progress protocol."""
    return progress.TaskProgress.of_log(log(api, ns, pod_name))


def wait(api, ns, release, timeout=900, **kw) -> cluster_state.Snapshot:
    return kube.wait_for_jobs(api, ns, release, timeout=timeout, say=say, **kw)


def pods_of(api, ns, job_substr: str):
    from kubernetes import client

    return [
        p
        for p in client.CoreV1Api(api).list_namespaced_pod(ns).items
        if job_substr in (p.metadata.labels or {}).get(JOB_NAME, "")
    ]


def tf_cluster_of(core, ns: str, container) -> dict:
    """TF_CONFIG's cluster of a live pod's container: TF_CLUSTER_SPEC in the run's ConfigMap, which the
    container takes by envFrom (the chart stores the run's environment once; the kubelet composes
    TF_CONFIG from it)."""
    import json

    maps = [core.read_namespaced_config_map(s.config_map_ref.name, ns) for s in container.env_from if s.config_map_ref]
    (spec,) = [m.data["TF_CLUSTER_SPEC"] for m in maps if "TF_CLUSTER_SPEC" in (m.data or {})]
    return json.loads(spec)


def log(api, ns, pod_name: str, container: str | None = None) -> str:
    """A pod's log: its training container's, or `container`'s (tf-cluster-agent: the API's side)."""
    from kubernetes import client

    if container:
        return client.CoreV1Api(api).read_namespaced_pod_log(pod_name, ns, container=container)
    return client.CoreV1Api(api).read_namespaced_pod_log(pod_name, ns)


def wait_for_log(
    api, ns, release: str, job_substr: str, index: str | None, pattern, timeout=600, node: str | None = None
) -> str:
    """Name of the running pod of that Job index (any index: None), on `node` if given, whose log
    matches `pattern` (a regex, or a function of the log text). A pod being deleted is not it."""
    matches = pattern if callable(pattern) else (lambda text: re.search(pattern, text))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in pods_of(api, ns, job_substr):
            if (
                index in (None, p.metadata.labels.get(INDEX))
                and node in (None, p.spec.node_name)
                and p.status.phase == "Running"
                and not p.metadata.deletion_timestamp
            ):
                try:
                    if matches(log(api, ns, p.metadata.name)):
                        return p.metadata.name
                except Exception:  # noqa: BLE001 - container still starting
                    pass
        time.sleep(2)
    where = f"{job_substr}-{index}" if index is not None else f"{job_substr}*"
    what = repr(pattern) if isinstance(pattern, str) else (pattern.__doc__ or pattern.__name__)
    pytest.fail(
        f"no running {where} pod{f' on {node}' if node else ''} logged {what} within {timeout}s:\n"
        + kube.diagnostics(api, ns, release)
    )


def delete_pod(api, ns, name: str) -> None:
    """`kubectl delete pod` as a user (or a node drain) does it: SIGTERM, then the pod's grace period."""
    from kubernetes import client

    client.CoreV1Api(api).delete_namespaced_pod(name, ns)
    say(f"deleted pod {name}")


def all_complete(snap: cluster_state.Snapshot, api, ns, release) -> None:
    states = snap.states()
    assert states and set(states.values()) == {"Complete"}, f"{states}\n{kube.diagnostics(api, ns, release)}"


def no_running_pods(api, ns) -> None:
    from kubernetes import client

    live = [
        p.metadata.name
        for p in client.CoreV1Api(api).list_namespaced_pod(ns).items
        if p.status.phase in ("Running", "Pending")
    ]
    assert live == [], f"pods still running after the run ended: {live}"


def pv_path_of(api, ns, claim: str) -> Path:
    from kubernetes import client

    pvc = client.CoreV1Api(api).read_namespaced_persistent_volume_claim(claim, ns)
    pv = client.CoreV1Api(api).read_persistent_volume(pvc.spec.volume_name)
    return Path((pv.spec.host_path or pv.spec.local).path)


def wait_gone(check, what: str, timeout=120):
    deadline = time.monotonic() + timeout
    while check():
        assert time.monotonic() < deadline, f"{what} still there after {timeout}s: {check()}"
        time.sleep(2)


# ----------------------------------------------------------------- scenarios
# Helm 3 against a real API server is also covered by tests/e2e/test_apiserver.py in every CI run.
@pytest.mark.parametrize("major", ["4", pytest.param("3", marks=pytest.mark.extended)], ids=["helm4", "helm3"])
def test_mwms_cpu_trains_through_cluster_dns_and_exports_the_model(api, ns, major):
    """`tf-cluster smoke` (the user's command) runs the MWMS example; then what only the cluster shows."""
    t0 = time.monotonic()
    r = smoke(ns, "mwms", "-f", EX / "mwms-cpu.yaml", "--helm", major)
    print(r.stdout[-3000:])
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "every Job Complete" in r.stdout and "helm test passed (test Pod phase Succeeded)" in r.stdout
    # every pod found its peers through cluster DNS and got its index into TF_CONFIG
    workers = sorted(pods_of(api, ns, "-worker-"), key=lambda p: p.metadata.labels[INDEX])
    assert [p.metadata.labels[INDEX] for p in workers] == ["0", "1"]
    for p in workers:
        text = log(api, ns, p.metadata.name)
        i = p.metadata.labels[INDEX]
        # each waits for the coordination service's leader (worker 0) alone: its pod watched, then its name
        assert re.search(
            rf"\[launcher worker-{i}\] all 1 peer\(s\) resolve after [0-9.]+s \(their pods watched", text
        ), text[-2000:]
        assert f"task worker:{i} chief={i == '0'}" in text, text[-2000:]
        assert reported(api, ns, p.metadata.name).progress["epoch"] == 5
    # the chief's exported model is on the checkpoints volume
    model = pv_path_of(api, ns, "mwms-tf-cluster-checkpoints") / "model"
    assert (model / "saved_model.pb").is_file(), sorted(model.parent.iterdir())
    # helm uninstall leaves nothing of the release; the claim (keepOnUninstall: false) and its volume go too
    pv_dir = model.parent
    r = helm_in(ns, major).uninstall("mwms", wait=True)
    assert r.returncode == 0, r.stderr
    wait_gone(lambda: kube.release_objects(api, ns, "mwms"), "release objects")
    wait_gone(lambda: pv_dir.exists() and [pv_dir], "the released volume's directory")
    say(f"mwms (helm {major}) passed in {time.monotonic() - t0:.0f}s")


def servers_stopped_by_the_leader(api, ns, release: str, snap: cluster_state.Snapshot) -> None:
    """ps, workers and the evaluator never exit on their own: their launchers saw the chief's Job
    Complete and stopped them, within a bound of its completion."""
    done = {n.split("-tf-cluster-")[1].rsplit("-", 1)[0]: j.status.completion_time for n, j in snap.jobs.items()}
    assert set(done) == {"chief", "worker", "ps", "evaluator"}
    lag = {role: (t - done["chief"]).total_seconds() for role, t in done.items()}
    say(f"seconds from the chief Job's completion to each role's: {lag}")
    # bound: the launcher watches the leading Job, then SIGTERM and up to the stop grace; in practice a few seconds
    assert max(lag.values()) <= 30, lag
    # (the evaluator may also end by itself, after its last evaluation: both are a clean stop).
    # A server still running when another task of its role was stopped is removed by its Job
    # (successPolicy, where a gang is on), so at least one pod of each role is left to read.
    events = launcher_events(api, ns)
    for role in ("ps", "worker", "evaluator"):
        assert pods_of(api, ns, f"-{role}-"), role
        for p in pods_of(api, ns, f"-{role}-"):
            text = log(api, ns, p.metadata.name)
            stopped = re.search(rf"Job {release}-tf-cluster-chief-\w+ is Complete", text)
            assert stopped or (role == "evaluator" and "command exited with 0" in text), text[-2000:]
            assert p.status.phase == "Succeeded", (p.metadata.name, p.status.phase)
            if stopped:  # and said so where a platform's tools look (kubectl describe pod, kubectl events)
                assert "StoppedWithLeader" in events.get(p.metadata.name, {}), (p.metadata.name, events)


def launcher_events(api, ns) -> dict[str, dict[str, str]]:
    """The Events the launchers recorded: pod -> reason -> message (files/launcher.py, Events)."""
    from kubernetes import client

    out: dict[str, dict[str, str]] = {}
    selector = f"source={kube.LAUNCHER_EVENTS}"
    for e in client.CoreV1Api(api).list_namespaced_event(ns, field_selector=selector).items:
        out.setdefault(e.involved_object.name, {})[e.reason] = e.message
    return out


@pytest.mark.extended  # CI runs this example to the same end checks with its chief killed (test_faults.py)
def test_parameter_server_with_evaluator_stops_by_itself(api, ns):
    t0 = time.monotonic()
    install(ns, "ps", EX / "parameter-server-evaluator.yaml")
    snap = wait(api, ns, "ps")
    all_complete(snap, api, ns, "ps")
    servers_stopped_by_the_leader(api, ns, "ps", snap)
    no_running_pods(api, ns)
    say(f"parameter server + evaluator passed in {time.monotonic() - t0:.0f}s")


@pytest.mark.extended  # CI keeps the MWMS deletion and the local ParameterServer kill
def test_deleting_a_parameter_server_worker_mid_run_still_completes(api, ns):
    install(
        ns,
        "psw",
        EX / "parameter-server.yaml",  # long enough that the deletion lands mid-run
        sets=("env[0].name=EPOCHS", "env[0].value=8", "env[1].name=STEPS_PER_EPOCH", "env[1].value=50"),
    )
    victim = wait_for_log(api, ns, "psw", "-worker-", "1", r"serving worker:1", timeout=600)
    chief = wait_for_log(
        api, ns, "psw", "-chief-", "0", lambda text: progress.TaskProgress.of_log(text).progress, timeout=600
    )
    delete_pod(api, ns, victim)
    at = reported(api, ns, chief).progress["epoch"]
    say(f"deleted worker 1 while the chief was at epoch {at}/8")
    snap = wait(api, ns, "psw")
    all_complete(snap, api, ns, "psw")
    names = [p.metadata.name for p in pods_of(api, ns, "-worker-") if p.metadata.labels[INDEX] == "1"]
    assert names and victim not in names, "worker 1 was replaced by a new pod"
    assert at < 8 and reported(api, ns, chief).progress["epoch"] == 8
    no_running_pods(api, ns)


@pytest.mark.extended  # CI: test_faults.py kills the MWMS chief (resume from the backup, the gang's replacement)
def test_deleting_a_mwms_worker_restarts_it_and_training_resumes_from_the_checkpoint(api, ns):
    install(
        ns,
        "resume",
        EX / "mwms-cpu.yaml",
        # long enough epochs (~5 s here) that the deletion lands mid-run, not after the end
        sets=("env[0].name=EPOCHS", "env[0].value=15", "env[1].name=STEPS_PER_EPOCH", "env[1].value=300"),
    )
    victim = wait_for_log(
        api,
        ns,
        "resume",
        "-worker-",
        "1",
        lambda text: progress.TaskProgress.of_log(text).progress.get("epoch", 0) >= 2,
        timeout=600,
    )
    delete_pod(api, ns, victim)
    snap = wait(api, ns, "resume")
    all_complete(snap, api, ns, "resume")
    replacement = [
        p
        for p in pods_of(api, ns, "-worker-")
        if p.metadata.labels[INDEX] == "1" and p.metadata.name != victim and p.status.phase == "Succeeded"
    ]
    assert replacement, (
        "worker 1 was not replaced: "
        + str([(p.metadata.name, p.status.phase) for p in pods_of(api, ns, "-worker-")])
        + f" worker Job status: {list(snap.jobs.values())[0].status}"
    )
    text = log(api, ns, replacement[0].metadata.name)
    after = progress.TaskProgress.of_log(text)
    resumed = after.resumed_at()
    assert resumed and resumed[-1] >= 2, text[-3000:]
    assert after.progress["epoch"] == 15
    # deleted = SIGTERM: every worker saved at the step in progress and exited 42 (the trainer's
    # preemption checkpoint), which job.restartExitCodes does not count
    assert (list(snap.jobs.values())[0].status.failed or 0) == 0
    say(f"worker 1 resumed at epoch {resumed[-1]} after its pod was deleted; no failure counted")
    gang = replacement[0].spec.scheduling_group  # on a node serving the gang API (docs/user-guide/gang-scheduling.md)
    if kube.serves_gang_api(api):
        from kubernetes import client

        assert gang is not None, "the pods of a release on a cluster serving the gang API join a PodGroup"
        group = client.SchedulingV1beta1Api(api).read_namespaced_pod_group(gang.pod_group_name, ns)
        assert group.spec.disruption_mode.all is not None  # multiWorkerMirrored: disrupted only as a whole
        say(f"the replacement joined the running gang {group.metadata.name} (minCount already met): placed alone")


@pytest.mark.extended  # CI keeps it on the real kube-apiserver (tests/e2e, Helm 4 and 3) and Argo CD's env change here
def test_helm_upgrade_with_a_changed_spec_starts_a_new_run(api, ns):
    quick = ("env[0].name=EPOCHS", "env[0].value=1", "env[1].name=STEPS_PER_EPOCH", "env[1].value=10")
    install(ns, "up", EX / "mwms-cpu.yaml", sets=quick)
    first = wait(api, ns, "up")
    all_complete(first, api, ns, "up")
    install(ns, "up", EX / "mwms-cpu.yaml", sets=quick[:1] + ("env[0].value=2",) + quick[2:], verb="upgrade")
    second = wait(api, ns, "up")
    all_complete(second, api, ns, "up")
    assert set(second.jobs).isdisjoint(first.jobs), (sorted(first.jobs), sorted(second.jobs))
    assert len(second.jobs) == 1


def test_a_bad_image_is_reported_and_the_job_fails(api, ns):
    install(
        ns,
        "bad",
        EX / "mwms-cpu.yaml",
        sets=(
            "image.repository=localhost/no-such-image",
            "job.activeDeadlineSeconds=30",
            "storage.checkpoints.type=emptyDir",
        ),
    )
    with pytest.raises(RunError) as e:
        wait(api, ns, "bad", timeout=300, stuck_grace=10)
    assert re.search(r"(ErrImagePull|ImagePullBackOff)", str(e.value)) and "no-such-image" in str(e.value), str(e.value)
    say(f"reported: {str(e.value).splitlines()[1]}")
    snap = wait(api, ns, "bad", timeout=300, stuck_grace=10**6)  # the deadline fails the Job: no hang
    (job,) = snap.jobs.values()
    assert cluster_state.job_state(job) == "Failed" and "DeadlineExceeded" in cluster_state.failed_reason(job)


@pytest.mark.parametrize(
    "code,reason", [(2, "PodFailurePolicy"), pytest.param(1, "FailedIndexes", marks=pytest.mark.extended)]
)
def test_a_crashing_trainer_fails_the_job_with_a_reason(api, ns, code, reason):
    """Exit 2 is non-retryable (fails at once); exit 1 is retried up to backoffLimitPerIndex, then fails."""
    install(
        ns,
        "crash",
        EX / "mwms-cpu.yaml",
        sets=(
            "command[0]=python3",
            "command[1]=-c",
            f"command[2]=print('bad config: no such dataset'); raise SystemExit({code})",
            "job.backoffLimitPerIndex=1",
            "storage.checkpoints.type=emptyDir",
        ),
    )
    snap = wait(api, ns, "crash", timeout=300)
    (job,) = snap.jobs.values()
    assert cluster_state.job_state(job) == "Failed", kube.diagnostics(api, ns, "crash")
    assert reason in cluster_state.failed_reason(job)
    report = kube.diagnostics(api, ns, "crash")
    assert "bad config: no such dataset" in report and "Failed" in report
    say(f"Job failed: {cluster_state.failed_reason(job)}")
