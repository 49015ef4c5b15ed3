"""The release installed with Helm on a real cluster, watched through the Kubernetes API.

`ClusterRunner` installs, watches and removes a release (`tf-cluster smoke`, `tune`'s cluster
trials). It only orchestrates: `kube` talks to the cluster (namespace, waiting, logs, diagnostics)
and `cluster_state` reads what the Jobs and pods say (`cluster_report`: Jobs and tasks, as
`tf-cluster status` describes a release already running, `kube.release_status`).
"""

from __future__ import annotations

from .. import cluster_state, kube
from ..errors import RunError
from ..helm import Helm, Values
from . import Cancel, Runner, RunReport, Say


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
        return cluster_state.cluster_report(snap, self.where, lambda p: kube.pod_log(self.api, self.namespace, p))

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
        selector = f"{cluster_state.INSTANCE}={self.release},{cluster_state.COMPONENT}=test"
        logs = kube.logs_of(self.api, self.namespace, selector)
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
