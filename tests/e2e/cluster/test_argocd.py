"""The chart under Argo CD 3.6 on the real node: Argo CD's own application controller and
repo server (built from github.com/argoproj/argo-cd/v3, started by `node up`) sync
Applications whose source is the chart in a git repository served over HTTP here, with
`prune` and `selfHeal` on, as docs/user-guide/upgrades-argocd.md recommends. Argo CD renders with the pinned Helm 4.

What a platform team needs from it: a run shows Progressing then Healthy (Degraded, with the
reason, when it fails), a finished run is never re-run by reconciliation, a change that does
not change what pods run leaves a running training alone, and one that does is a new run
whose old Jobs are pruned, never an immutable-field sync error.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import time

import pytest
import yaml
from node import deferred
from node.argocd import GIT_ROOT, GIT_URL, REGISTRY  # hack/node (the e2e harness)
from node.argocd import NAMESPACE as ARGO_NS
from node.proc import pid_of
from test_cluster import EX, JOB_NAME, KUBECONFIG, SMALL, say

from rendering import deep_merge
from tf_cluster import ROOT, helm, kube

GROUP, VERSION, PLURAL = "argoproj.io", "v1alpha1", "applications"
EXAMPLE = yaml.safe_load((EX / "argocd" / "application.yaml").read_text())
OCI_EXAMPLE = yaml.safe_load((EX / "argocd" / "application-oci.yaml").read_text())
CHART = yaml.safe_load((ROOT / "charts/tf-cluster/Chart.yaml").read_text())["version"]


def argocd_running() -> bool:
    """Asked as each test starts: `make check` builds and starts Argo CD after the node is up,
    beside the first scenarios (hack/node/deferred.py), so the first test may wait for it."""
    why = deferred.wait("argocd")
    if why:
        print(f"[argocd] {why}")
    return why is None and bool(pid_of("argocd-application-controller"))


pytestmark = pytest.mark.needs(
    "Argo CD (argocd-application-controller on the e2e node)",
    argocd_running,
    "`make e2e` builds it and starts it with the node (`make check`: just after it)",
)


def training(epochs: int, steps: int, **more) -> dict:
    """The MWMS example (2 workers, checkpoints on a PVC) at a given length, sized for the node."""
    base = deep_merge(yaml.safe_load((EX / "mwms-cpu.yaml").read_text()), yaml.safe_load(SMALL.read_text()))
    base["env"] = [{"name": "EPOCHS", "value": str(epochs)}, {"name": "STEPS_PER_EPOCH", "value": str(steps)}]
    return deep_merge(no_auto(base), more)


def no_auto(values: dict) -> dict:
    """`values` with what `auto` would discover named. `auto` follows the API versions Argo CD hands
    Helm, which change while the other lane's scenarios add and remove CRDs (monitoring's PodMonitor
    and PrometheusRule, TFJob's): a cold CI run saw a TensorBoard-only change start a new run, a
    warm one an Application go OutOfSync after its run when the monitoring CRDs appeared, and the
    CI run of 08c1f76 the notebook's Application go OutOfSync while test_monitoring.py began in the
    other lane (its values did not name them then). What this module tests is what a values change
    and the pods' own writes do."""
    values.setdefault("scheduling", {})["gang"] = True
    values.setdefault("metrics", {}).update({"podMonitor": {"enabled": False}, "prometheusRule": {"enabled": False}})
    return values


@pytest.fixture(scope="module")
def chart_repo() -> tuple[str, str]:
    """A git repository holding the chart at two tags: this version and a patch bump that
    changes only Chart.yaml's version (what a platform team pins with targetRevision)."""
    name = f"platform-{hashlib.sha256(str(time.time()).encode()).hexdigest()[:6]}.git"
    bare, work = GIT_ROOT / name, GIT_ROOT / (name + ".work")
    git = ["git", "-c", "user.email=e2e@tf-cluster", "-c", "user.name=e2e", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q", "--bare", bare], check=True)
    subprocess.run([*git, "init", "-q", work], check=True)
    shutil.copytree(ROOT / "charts", work / "charts")
    subprocess.run([*git, "-C", work, "add", "."], check=True)
    subprocess.run([*git, "-C", work, "commit", "-qm", f"tf-cluster {CHART}"], check=True)
    subprocess.run([*git, "-C", work, "tag", f"tf-cluster-{CHART}"], check=True)
    major, minor, patch = CHART.split(".")
    bumped = f"{major}.{minor}.{int(patch) + 1}"
    chart_yaml = work / "charts/tf-cluster/Chart.yaml"
    chart_yaml.write_text(chart_yaml.read_text().replace(f"version: {CHART}", f"version: {bumped}"))
    subprocess.run([*git, "-C", work, "commit", "-qam", f"tf-cluster {bumped}"], check=True)
    subprocess.run([*git, "-C", work, "tag", f"tf-cluster-{bumped}"], check=True)
    subprocess.run([*git, "-C", work, "push", "-q", bare, "main", "--tags"], check=True)
    say(f"git repository {GIT_URL}/{name}: tags tf-cluster-{CHART}, tf-cluster-{bumped}")
    yield f"{GIT_URL}/{name}", bumped
    shutil.rmtree(bare, ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)


def settled(st: dict) -> bool:
    """Synced and Healthy after a sync that succeeded (a new Application is briefly
    OutOfSync/Healthy before its first sync: no resources yet)."""
    return (st.get("sync", {}).get("status"), st.get("health", {}).get("status")) == ("Synced", "Healthy") and (
        st.get("operationState") or {}
    ).get("phase") == "Succeeded"


class App:
    """One Argo CD Application, watched the way `argocd app get` shows it."""

    def __init__(self, api, ns: str, source: dict, values: dict, example: dict = EXAMPLE):
        from kubernetes import client

        self.api, self.ns, self.name = api, ns, ns  # one Application per test namespace
        self.co = client.CustomObjectsApi(api)
        self.batch = client.BatchV1Api(api)
        self.core = client.CoreV1Api(api)
        self.seen: list[tuple[float, str, str]] = []  # (seconds, sync, health) whenever it changed
        self.t0 = time.monotonic()
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Application",
            "metadata": {
                "name": self.name,
                "namespace": ARGO_NS,
                "finalizers": ["resources-finalizer.argocd.argoproj.io"],  # deleting it deletes what it made
            },
            "spec": {
                "project": "default",
                "source": {**source, "helm": {"releaseName": "train", "valuesObject": values}},
                "destination": {"server": "https://kubernetes.default.svc", "namespace": ns},
                "syncPolicy": example["spec"]["syncPolicy"],  # the documented one: automated prune + selfHeal
                "ignoreDifferences": example["spec"]["ignoreDifferences"],  # the gang's lowered minCount
            },
        }
        self.co.create_namespaced_custom_object(GROUP, VERSION, ARGO_NS, PLURAL, body)
        say(f"Application {self.name} created ({source['repoURL']} {source['targetRevision']})")

    def get(self) -> dict:
        return self.co.get_namespaced_custom_object(GROUP, VERSION, ARGO_NS, PLURAL, self.name)

    def status(self) -> dict:
        st = self.get().get("status") or {}
        sync, health = st.get("sync", {}).get("status", "-"), st.get("health", {}).get("status", "-")
        if not self.seen or self.seen[-1][1:] != (sync, health):
            self.seen.append((time.monotonic() - self.t0, sync, health))
            say(f"  {time.monotonic() - self.t0:6.1f}s  {sync:10} {health}")
        return st

    def out_of_sync(self, st: dict, ns: str) -> str:
        """The resources Argo CD found OutOfSync; a ConfigMap or Secret with its live object as it is now."""
        out = []
        for r in st.get("resources") or []:
            if r.get("status") == "Synced":
                continue
            out.append(f"{r['kind']}/{r['name']}: {r.get('status')}")
            get = {"ConfigMap": self.core.read_namespaced_config_map, "Secret": self.core.read_namespaced_secret}
            if r["kind"] in get:
                live = self.core.api_client.sanitize_for_serialization(get[r["kind"]](r["name"], ns))
                if r["kind"] == "Secret":
                    live.pop("data", None)  # the token: not for a CI log
                out.append(yaml.safe_dump(live).rstrip())  # managedFields kept: who wrote what
        return "\n".join(out) or f"no resource OutOfSync; the Application's conditions: {st.get('conditions')}"

    def patch(self, spec: dict, what: str) -> None:
        self.co.patch_namespaced_custom_object(GROUP, VERSION, ARGO_NS, PLURAL, self.name, {"spec": spec})
        say(f"Application {self.name}: {what}")

    def set_values(self, values: dict, what: str) -> None:
        source = self.get()["spec"]["source"]
        source["helm"]["valuesObject"] = values
        self.patch({"source": source}, what)

    def wait(self, what: str, pred, timeout: float = 600) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            st = self.status()
            if pred(st):
                return st
            time.sleep(1)
        pytest.fail(f"Application {self.name}: not {what} within {timeout:.0f}s; status:\n{yaml.safe_dump(st)}")

    def synced_after(self, n_syncs: int, timeout: float = 300) -> dict:
        """Wait for sync operation number n_syncs to finish; it must have succeeded."""
        st = self.wait(
            f"through sync #{n_syncs}",
            lambda s: (
                len(s.get("history") or []) >= n_syncs
                and (s.get("operationState") or {}).get("phase") in ("Succeeded", "Failed", "Error")
                and s.get("sync", {}).get("status") == "Synced"
            ),
            timeout,
        )
        op = st["operationState"]
        assert op["phase"] == "Succeeded", f"sync #{n_syncs} {op['phase']}: {op.get('message')}"
        assert not st.get("conditions"), st["conditions"]
        return st

    def jobs(self) -> dict[str, str]:
        return {j.metadata.name: j.metadata.uid for j in self.batch.list_namespaced_job(self.ns).items}

    def pods(self) -> dict[str, tuple[str, str]]:
        return {
            p.metadata.name: (p.metadata.uid, p.status.phase)
            for p in self.core.list_namespaced_pod(self.ns).items
            if JOB_NAME in (p.metadata.labels or {})
        }

    def delete(self) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self.co.delete_namespaced_custom_object(GROUP, VERSION, ARGO_NS, PLURAL, self.name)
        except ApiException:
            return
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                self.get()
            except ApiException:
                return
            time.sleep(1)


@pytest.fixture
def app_factory(api, ns, chart_repo):
    made: list[App] = []

    def make(values: dict, source: dict | None = None, example: dict = EXAMPLE) -> App:
        git = {"repoURL": chart_repo[0], "path": "charts/tf-cluster", "targetRevision": f"tf-cluster-{CHART}"}
        made.append(App(api, ns, source or git, values, example))
        return made[-1]

    yield make
    for a in made:
        a.delete()


def test_argocd_runs_a_training_to_healthy_and_never_re_runs_it(app_factory, api, ns):
    """Created -> Synced + Progressing -> Healthy; then >= 10 reconciliations with one sync and
    one Job creation; then a serviceAccount change after the run is a new run, not a sync error."""
    from kubernetes import client

    app = app_factory(training(3, 20))
    st = app.wait(
        "Synced and Healthy after its first sync",
        settled,
    )
    healthy_s = time.monotonic() - app.t0
    states = [(s, h) for _, s, h in app.seen]
    assert ("Synced", "Progressing") in states, f"never showed Progressing while training: {app.seen}"
    assert st["sync"]["status"] == "Synced"
    assert {j.status.succeeded for j in app.batch.list_namespaced_job(ns).items} == {2}  # 2 workers, complete
    say(f"Application created -> Healthy in {healthy_s:.1f}s (states: {app.seen})")

    # Reconciliation after completion: the node's Argo CD re-compares every 5 s (default 120 s).
    first_jobs = app.jobs()
    reconciled, jobs_seen = {st.get("reconciledAt")}, set(first_jobs.values())
    t = time.monotonic()
    while len(reconciled) < 11:  # 10 reconciliations after the first one seen
        assert time.monotonic() - t < 240, f"only {len(reconciled)} reconciliations in 240 s"
        st = app.status()
        assert (st["sync"]["status"], st["health"]["status"]) == ("Synced", "Healthy"), st
        reconciled.add(st.get("reconciledAt"))
        jobs_seen |= set(app.jobs().values())
        time.sleep(1)
    syncs = len(st.get("history") or [])
    say(
        f"after {len(reconciled) - 1} reconciliation cycles ({time.monotonic() - t:.0f}s): "
        f"{syncs} sync operation(s), {len(jobs_seen)} Job(s) ever created"
    )
    assert syncs == 1 and len(jobs_seen) == 1 == len(first_jobs)
    # Synced through it although the finished workers' agents lowered the gang's minCount: the
    # example's ignoreDifferences (without it, self-heal would set the gang whole again)
    (group,) = client.SchedulingV1beta1Api(api).list_namespaced_pod_group(ns).items
    assert group.spec.scheduling_policy.gang.min_count == 1

    # serviceAccount change on a finished run: the pods change, so a new run; old Jobs pruned.
    app.set_values(training(3, 20, serviceAccount={"create": True, "name": "trainer"}), "serviceAccount.name=trainer")
    st = app.synced_after(2)
    st = app.wait(
        "Healthy again, on the new run only",
        lambda s: s["health"]["status"] == "Healthy" and app.jobs() and set(app.jobs()).isdisjoint(first_jobs),
    )
    new_jobs = app.jobs()
    assert new_jobs and not set(new_jobs) & set(first_jobs), (first_jobs, new_jobs)
    assert "immutable" not in str(st.get("operationState")), st["operationState"]
    pods = app.core.list_namespaced_pod(ns, label_selector=JOB_NAME).items
    assert {p.spec.service_account_name for p in pods} == {"trainer"}
    say(f"serviceAccount change: new run {sorted(new_jobs)}, old Jobs pruned, sync Succeeded")


def test_argocd_leaves_a_running_training_alone_unless_what_it_runs_changes(app_factory, api, ns, chart_repo):
    """While a long training runs: a TensorBoard-only values change and a chart version bump
    sync without touching its Jobs or pods; an env change is a new run, the old one pruned."""
    long_run = training(200, 300)
    app = app_factory(long_run)
    app.wait(
        "Synced with training pods running",
        lambda s: (
            s.get("sync", {}).get("status") == "Synced"
            and sorted(p for _, p in app.pods().values()) == ["Running", "Running"]
        ),
    )
    jobs, pods = app.jobs(), app.pods()
    say(f"training: Jobs {sorted(jobs)}, pods {sorted(pods)}")

    def untouched(after: str) -> None:
        assert app.jobs() == jobs, f"{after}: Jobs changed {jobs} -> {app.jobs()}"
        now = app.pods()
        assert {n: uid for n, (uid, _) in now.items()} == {n: uid for n, (uid, _) in pods.items()}, after
        assert {p for _, p in now.values()} == {"Running"}, f"{after}: {now}"
        say(f"{after}: same Jobs and pod UIDs, still Running")

    app.set_values(deep_merge(long_run, {"tensorboard": {"enabled": True}}), "TensorBoard on (values, not pods)")
    st = app.synced_after(2)
    assert any(r["kind"] == "Deployment" for r in st["resources"]), "TensorBoard Deployment not synced"
    untouched("TensorBoard-only values change")

    _, bumped = chart_repo
    app.patch(
        {"source": {**app.get()["spec"]["source"], "targetRevision": f"tf-cluster-{bumped}"}},
        f"chart {CHART} -> {bumped}",
    )
    st = app.synced_after(3)
    assert st["sync"]["revision"] == st["history"][-1]["revision"]
    untouched(f"chart version bump {CHART} -> {bumped}")

    app.set_values(deep_merge(training(2, 10), {"tensorboard": {"enabled": True}}), "EPOCHS 200 -> 2 (pods change)")
    app.synced_after(4)
    app.wait(
        "Healthy, on the new short run only",
        lambda s: s["health"]["status"] == "Healthy" and app.jobs() and set(app.jobs()).isdisjoint(jobs),
        600,
    )
    new = app.jobs()
    assert new and not set(new) & set(jobs), f"old Jobs not pruned / no new run: {jobs} -> {new}"
    say(f"pods-changing values: new run {sorted(new)}, old Jobs {sorted(jobs)} pruned")


def test_argocd_shows_a_failing_training_degraded_with_the_reason(app_factory, ns):
    app = app_factory(training(1, 1, command=["python3", "-c", "import sys; print('bad flag --lr'); sys.exit(2)"]))
    st = app.wait("Degraded", lambda s: s.get("health", {}).get("status") == "Degraded", 300)
    jobs = [r for r in st.get("resources", []) if r["kind"] == "Job"]
    assert jobs and any(r.get("health", {}).get("status") == "Degraded" for r in jobs), jobs
    message = " ".join(r.get("health", {}).get("message", "") for r in jobs)
    say(f"Degraded: {message}")
    assert "PodFailurePolicy" in message or "exit code 2" in message or "backoff" in message.lower(), message
    assert st["sync"]["status"] == "Synced"


@pytest.fixture(scope="module")
def oci_chart(tmp_path_factory) -> dict:
    """The chart packaged and pushed to the node's OCI registry, and the repository Secret
    Argo CD needs for a plain-HTTP OCI registry (as application-oci.yaml describes)."""
    from kubernetes import client

    out = tmp_path_factory.mktemp("package")
    helm.Helm("4").package(out)
    tgz = out / f"tf-cluster-{CHART}.tgz"
    helm.Helm("4").push(tgz, f"oci://{REGISTRY}/charts", plain_http=True)
    say(f"pushed {tgz.name} to oci://{REGISTRY}/charts")
    secret = client.V1Secret(
        metadata=client.V1ObjectMeta(
            name="tf-cluster-oci", namespace=ARGO_NS, labels={"argocd.argoproj.io/secret-type": "repository"}
        ),
        string_data={
            "type": "helm",
            "name": "tf-cluster",
            "url": f"{REGISTRY}/charts",
            "enableOCI": "true",
            "insecureOCIForceHttp": "true",
        },
    )
    core = client.CoreV1Api(kube.client_for(KUBECONFIG))
    try:
        core.create_namespaced_secret(ARGO_NS, secret)
    except client.exceptions.ApiException as e:
        if e.status != 409:
            raise
    return {"repoURL": f"{REGISTRY}/charts", "chart": "tf-cluster", "targetRevision": CHART}


def test_argocd_syncs_the_chart_from_an_oci_registry(app_factory, oci_chart, ns):
    """application-oci.yaml: the chart pulled by version from an OCI registry, to Healthy."""
    assert OCI_EXAMPLE["spec"]["source"]["chart"] == oci_chart["chart"] == "tf-cluster"
    app = app_factory(training(2, 10), source=oci_chart, example=OCI_EXAMPLE)
    st = app.wait(
        "Synced and Healthy from the OCI chart",
        settled,
    )
    assert st["sync"]["revision"] == CHART, st["sync"]
    assert app.jobs() and {j.status.succeeded for j in app.batch.list_namespaced_job(ns).items} == {2}
    say(f"OCI source {oci_chart['repoURL']}/tf-cluster:{CHART} -> Healthy in {time.monotonic() - app.t0:.1f}s")


def test_argocd_keeps_the_notebook_in_sync_with_its_token_and_heartbeat(app_factory, api, ns):
    """The notebook under Argo CD (values-examples/notebook-coordinator.yaml): the chart renders the
    token's Secret and the coordinator's heartbeat ConfigMap without data; the notebook pod then
    stores a token in the one and a kernel renews the other. Neither write may make the Application
    OutOfSync, nor may self-heal wipe them: >= 10 reconciliations with one sync, the token
    unchanged, while a coordinator renews its heartbeat (and the servers keep serving it)."""
    import base64

    values = deep_merge(
        yaml.safe_load((EX / "notebook-coordinator.yaml").read_text()),
        deep_merge(
            yaml.safe_load(SMALL.read_text()),
            {
                "notebook": {"resources": {"requests": {"cpu": "100m", "memory": "512Mi"}}},
                "tensorboard": {"resources": {"requests": {"cpu": "10m", "memory": "128Mi"}}},
            },
        ),
    )
    values = no_auto(values)
    app = app_factory(values)
    secret = "train-tf-cluster-notebook"

    def token() -> str:
        data = app.core.read_namespaced_secret(secret, ns).data or {}
        return base64.b64decode(data.get("token", "")).decode()

    def notebook_ready(st) -> bool:
        return st.get("sync", {}).get("status") == "Synced" and any(
            r["kind"] == "Deployment"
            and r["name"].endswith("-notebook")
            and r.get("health", {}).get("status") == "Healthy"
            for r in st.get("resources", [])
        )

    app.wait("Synced with the notebook Deployment Healthy", notebook_ready)
    first = token()
    assert len(first) == 48, "the notebook pod stored its token in the chart's data-less Secret"
    # a kernel-side heartbeat, as tf_cluster_notebook.connect() in a notebook makes it, for the whole check
    heartbeat = subprocess.Popen(
        [
            str(ROOT / ".tools/bin/kubectl"), "--kubeconfig", KUBECONFIG, "-n", ns, "exec",
            "deploy/train-tf-cluster-notebook", "-c", "notebook", "--", "python3", "-c",
            "import time, tf_cluster_notebook as t; s = t.connect(interval=2); time.sleep(90)",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        st = app.status()
        reconciled, t = {st.get("reconciledAt")}, time.monotonic()
        while len(reconciled) < 11:
            assert time.monotonic() - t < 240, f"only {len(reconciled)} reconciliations in 240 s"
            st = app.status()
            assert st["sync"]["status"] == "Synced", app.out_of_sync(st, ns)
            reconciled.add(st.get("reconciledAt"))
            time.sleep(1)
        (beat,) = [r for r in st["resources"] if r["kind"] == "ConfigMap" and "-chief-" in r["name"]]
        assert beat.get("status") == "Synced", beat
        holder = (app.core.read_namespaced_config_map(beat["name"], ns).data or {}).get("holderIdentity", "")
        assert "/kernel-" in holder, f"no coordinator renewed the heartbeat during the check: {holder!r}"
        assert all(v is None for v in (j.status.succeeded for j in app.batch.list_namespaced_job(ns).items)), (
            "the servers stopped while the kernel's heartbeat was renewed"
        )
        syncs = len(st.get("history") or [])
        assert syncs == 1 and token() == first, (syncs, "token changed" if token() != first else "")
        say(
            f"notebook under Argo CD: {len(reconciled) - 1} reconciliations in {time.monotonic() - t:.0f}s, "
            f"{syncs} sync, Secret's token kept, heartbeat renewed by {holder} and still Synced"
        )
    finally:
        heartbeat.kill()
