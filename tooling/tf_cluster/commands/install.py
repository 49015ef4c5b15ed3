"""`tf-cluster install | upgrade | uninstall`: a release of the bundled chart on your cluster, with
no checkout and no separate chart download.

    tf-cluster install mnist -f values.yaml -n ml        # helm install, then the tasks' status until they run
    tf-cluster install mnist -f values.yaml --wait complete   # ... until every Job is Complete or Failed
    tf-cluster status mnist -n ml --watch                 # follow it later
    tf-cluster upgrade mnist -f values.yaml -n ml         # helm upgrade (a new run if what the pods run changed)
    tf-cluster uninstall mnist -n ml                      # helm uninstall, until its pods are gone; the namespace stays

Helm does the work (the chart is this command's own: `tf-cluster chart path`); the release is an
ordinary Helm release (`helm list`, `helm history`, Argo CD all see it). After an install or upgrade
the command waits, printing what the tasks do, until every task runs (`--wait started`, the
default), until every Job finished (`--wait complete`), or not at all (`--wait none`). Stopping the
wait (Ctrl-C, SIGTERM) leaves the release installed: it is what you asked for. Stopping Helm itself
leaves nothing half-applied: an interrupted install is uninstalled, an interrupted upgrade rolled
back. A namespace the install creates is not deleted by uninstall (other things may live in it by
then): `kubectl delete namespace NS`.
"""

from __future__ import annotations

import argparse
import signal
import time

from .. import cluster_state, kube
from ..errors import RunError, UsageError
from ..helm import MAJORS, Helm
from ..values import add_values_args, values_from
from . import Subparsers, add_release_args

WAITS = ("started", "complete", "none")


def add_parser(sub: Subparsers) -> None:
    intro = __doc__.split("\n\n")[0]
    for verb, what in (
        ("install", "install a release of the bundled chart on your cluster and wait until its tasks run"),
        ("upgrade", "upgrade a release of the bundled chart with new values and wait until its tasks run"),
    ):
        p = sub.add_parser(verb, help=what, description=intro)
        add_release_args(p)
        add_values_args(p)
        p.add_argument(
            "--wait",
            choices=WAITS,
            default="started",
            help="after Helm: until every task runs (started, the default), until every Job finished "
            "(complete), or return at once (none)",
        )
        p.add_argument("--timeout", type=float, default=900, metavar="S", help="seconds to wait (900)")
        p.set_defaults(func=run, verb=verb)
    p = sub.add_parser("uninstall", help="uninstall a release and wait until its pods are gone; its namespace stays")
    add_release_args(p)
    p.add_argument("--helm", choices=MAJORS, default="4", help="Helm major version (default 4)")
    p.set_defaults(func=run_uninstall)


def started(snap: cluster_state.Snapshot) -> str:
    """A reason to stop waiting once every task has begun (or the run is already over), or a Job failed."""
    if snap.failed_jobs():
        return "a Job failed"
    return "every task started" if snap.started() else ""


def run(args: argparse.Namespace) -> int:
    if not args.timeout > 0:  # nan too: it would never time out
        raise UsageError(f"--timeout {args.timeout}: a number of seconds above 0")
    values = values_from(args)
    api, namespace = kube.connect(str(args.kubeconfig) if args.kubeconfig else None, args.namespace)
    t0 = time.monotonic()

    def tell(msg: str) -> None:
        print(f"[{args.verb} {time.monotonic() - t0:6.1f}s] {msg}", flush=True)

    helm = Helm(args.helm, kubeconfig=args.kubeconfig, namespace=namespace)
    if args.verb == "install" and kube.ensure_namespace(api, namespace):
        tell(f"namespace {namespace} created (uninstall leaves it: kubectl delete namespace {namespace})")
    tell(f"helm {args.helm} {args.verb} {args.release} -n {namespace} {values.describe()}".rstrip())
    try:
        if args.verb == "install":
            helm.install(args.release, values, check=True)
        else:
            helm.upgrade(args.release, values, check=True)
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM, SIGHUP while Helm works: undo what of it landed
        if args.verb == "install":
            tell(f"stopped during helm install: uninstalling what of release {args.release} landed")
            helm.uninstall(args.release, wait=True, timeout="3m")
        else:
            tell(f"stopped during helm upgrade: rolling release {args.release} back to its previous revision")
            helm.rollback(args.release, wait=True, timeout="3m")
        raise
    done = {"install": "installed", "upgrade": "upgraded"}[args.verb]
    tell(f"release {args.release} {done} (helm -n {namespace} status {args.release})")
    if args.wait == "none":
        return 0
    goal = "every Job finished" if args.wait == "complete" else "every task runs"
    try:  # the line is said inside: a signal right after it still ends in "stays installed"
        tell(f"waiting until {goal} (Ctrl-C stops waiting; the release stays)")
        snap = kube.wait_for_jobs(
            api,
            namespace,
            args.release,
            timeout=args.timeout,
            say=tell,
            until=None if args.wait == "complete" else started,
        )
    except RunError as e:
        raise RunError(f"{e}\nthe release stays installed: tf-cluster uninstall {args.release} -n {namespace}") from e
    except KeyboardInterrupt as e:
        tell(
            f"stopped waiting; release {args.release} stays installed (follow it: tf-cluster status {args.release} "
            f"-n {namespace} --watch; remove it: tf-cluster uninstall {args.release} -n {namespace})"
        )
        return 128 + getattr(e, "signum", signal.SIGINT)
    _, report, _ = kube.release_status(api, namespace, args.release)
    print(report.status(), flush=True)
    failed = snap.failed_jobs()
    if failed:
        tell("; ".join(failed) + f" (logs: tf-cluster logs {args.release} -n {namespace})")
        return 7
    if not snap.finished():
        tell(f"running; follow it with: tf-cluster status {args.release} -n {namespace} --watch")
    return 0


def run_uninstall(args: argparse.Namespace) -> int:
    api, namespace = kube.connect(str(args.kubeconfig) if args.kubeconfig else None, args.namespace)
    helm = Helm(args.helm, kubeconfig=args.kubeconfig, namespace=namespace)
    t0 = time.monotonic()

    def tell(msg: str) -> None:
        print(f"[uninstall {time.monotonic() - t0:6.1f}s] {msg}", flush=True)

    found = helm.run("status", args.release)
    if found.returncode != 0 and "not found" in found.stderr:  # as status and logs say of a release not there
        raise UsageError(f"no release {args.release} in namespace {namespace}: helm list -n {namespace}")
    helm.uninstall(args.release, wait=True, timeout="5m", check=True)
    # Helm deletes the Jobs; their pods go after them (the garbage collector), still stopping
    left = kube.wait_for_no_pods(api, namespace, args.release, timeout=300, say=tell)
    if left:
        raise RunError(f"release {args.release} uninstalled, but pods still stop after 300s: {', '.join(left)}")
    kept = kube.release_objects(api, namespace, args.release, count_terminating=False)
    tell(
        f"release {args.release} uninstalled from namespace {namespace}, its pods gone"
        + (f"; kept (storage.*.keepOnUninstall, or not the chart's): {', '.join(kept)}" if kept else "")
        + "; the namespace stays"
    )
    return 0
