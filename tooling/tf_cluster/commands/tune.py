"""`tf-cluster tune`: a hyperparameter study whose trials are whole tf-cluster releases, run on
this machine (the default) or on a cluster (--kubeconfig). `tf-cluster tune show STUDY` prints a
stored study."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from .. import helm, kube, manifests, tune
from ..errors import UsageError, require_extra
from ..localrun.local_runner import LocalRunner
from ..localrun.processes import clean_workdir
from ..runner.cluster import ClusterRunner
from ..values import add_values_args, values_from
from . import Subparsers

if TYPE_CHECKING:
    import optuna


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "tune",
        help="hyperparameter study: trials are whole releases (Optuna)",
        description=__doc__ + " Example: tf-cluster tune -f values.yaml --script train.py --space space.yaml",
    )
    add_values_args(p)
    p.add_argument("--space", type=Path, required=True, help="search space file (tf-cluster docs tuning)")
    p.add_argument(
        "--out", type=Path, help="study folder: study.db, trial runs, best-values.yaml, plots (default tune/<study>)"
    )
    p.add_argument("--storage", metavar="URL", help="SQLAlchemy URL of the study store (default: sqlite in --out)")
    p.add_argument("--resume", action="store_true", help="continue a stored study (after Ctrl-C or a crash)")
    p.add_argument("--kubeconfig", help="run trials on this cluster (one Helm release per trial)")
    p.add_argument("-n", "--namespace", default="tf-tune", help="namespace for cluster trials (default tf-tune)")
    p.add_argument("--keep", action="store_true", help="leave each cluster trial's release installed")
    p.add_argument("--no-isolation", action="store_true", help="local trials as plain processes")
    p.set_defaults(func=run)

    show = sub.add_parser("tune-show")  # `tune show STUDY` (cli.main rewrites it); not listed: no help
    show.add_argument("study")
    show.add_argument("--out", type=Path)
    show.add_argument("--storage", metavar="URL")
    show.set_defaults(func=run_show)


def run(args: argparse.Namespace) -> int:
    require_extra("tune", "optuna", "matplotlib", feature="tf-cluster tune")
    space = tune.load_space(args.space)
    base = values_from(args)
    out = (args.out or Path("tune") / space.study).resolve()
    out.mkdir(parents=True, exist_ok=True)
    url = tune.storage_url(out, args.storage)
    say = print_flush
    docs = helm.parse(helm.Helm(args.helm).template(tune.release_name(space.study, 0), base))
    tasks = len(manifests.pods(docs))
    # the cluster reached before the study is stored: a kubeconfig that fails leaves no study behind
    api = kube.connect(args.kubeconfig, args.namespace)[0] if args.kubeconfig else None
    study = tune.open_study(space, url, resume=args.resume, say=say)  # before any namespace is made
    backend, created = cluster_backend(args, api, tasks) if api is not None else local_backend(args, out, tasks)
    say(
        f"tf-cluster tune: study {space.study} ({space.algorithm}, {space.goal} {space.metric}), "
        f"{space.max_trials} trials, {space.parallel} at once, {tasks} task(s) each, "
        + (f"on {args.kubeconfig} namespace {args.namespace}" if args.kubeconfig else f"on this machine ({out}/trials)")
        + f"; stored in {url}"
    )
    try:
        tune.run_study(space, base, backend, study, say=say)
    finally:
        if created and not args.keep:
            kube.delete_namespace(api, args.namespace)
            say(f"namespace {args.namespace} deleted")
    report(study, space, base, out, say, args.helm)
    return 0


def report(study: optuna.Study, space: tune.Space, base: helm.Values, out: Path, say: tune.Say, major: str) -> None:
    done = tune.counted(study)
    extra = len(study.user_attrs.get(tune.INTERRUPTED, []))
    say(
        f"\n== study {space.study}: {len(done)} trials"
        + (f" (+{extra} interrupted, run again)" if extra else "")
        + " =="
    )
    say(tune.table(study, space, best_first=True))
    for path in tune.write_results(study, space, base, out, say, major):
        say(f"wrote {path}")
    complete = [t for t in done if t.state.name == "COMPLETE"]
    if complete:
        best = study.best_trial
        say(f"best: trial {best.number}, {space.metric} {best.value:g}: {tune.fmt_params(best.params)}")


def local_backend(args: argparse.Namespace, out: Path, tasks: int) -> tuple[tune.Backend, bool]:
    def make(release: str, values: helm.Values, number: int) -> LocalRunner:
        docs = helm.parse(helm.Helm(args.helm).template(release, values))
        pods = manifests.pods(docs, node_cpus=os.cpu_count() or 1)
        workdir = out / "trials" / str(number)
        clean_workdir(workdir)
        return LocalRunner(docs, pods, workdir, status_every=2.0, isolate=False if args.no_isolation else None)

    return tune.Backend(make, tasks, local=True, logs=tune.local_logs, helm_major=args.helm), False


def cluster_backend(args: argparse.Namespace, api: object, tasks: int) -> tuple[tune.Backend, bool]:
    h = helm.Helm(args.helm, kubeconfig=args.kubeconfig, namespace=args.namespace)
    if kube.namespace_phase(api, args.namespace) == "Terminating":
        raise UsageError(f"namespace {args.namespace} is still being deleted (an earlier study's); wait and retry")
    created = kube.ensure_namespace(api, args.namespace)  # before any trial: no trial owns (and deletes) it

    def make(release: str, values: helm.Values, number: int) -> ClusterRunner:
        # a trial waiting for room (parallel trials beyond what the cluster holds) is not stuck
        return ClusterRunner(h, release, values, keep=args.keep, say=lambda _s: None, stuck_grace=600)

    def cleanup(release: str) -> None:
        if h.run("status", release).returncode == 0:
            h.uninstall(release, wait=True, timeout="3m")
            print_flush(f"uninstalled {release}, left by the stopped tuner")

    return tune.Backend(make, tasks, local=False, cleanup=cleanup, helm_major=args.helm), created


def run_show(args: argparse.Namespace) -> int:
    require_extra("tune", "optuna", "matplotlib", feature="tf-cluster tune show")
    import optuna

    tune.quiet_optuna()
    out = (args.out or Path("tune", args.study)).resolve()
    url = tune.storage_url(out, args.storage)
    if args.study not in optuna.get_all_study_names(url):
        raise UsageError(f"no study {args.study!r} in {url}")
    study = optuna.load_study(study_name=args.study, storage=url)
    metric = study.user_attrs.get("metric", "value")
    space = tune.Space(
        Path(study.user_attrs.get("space", "?")), args.study, metric, study.direction.name.lower(), (), 0
    )
    print(tune.table(study, space, best_first=True))
    if any(t.state.name == "COMPLETE" for t in study.trials):
        best = study.best_trial
        print(f"best: trial {best.number}, {metric} {best.value:g}: {tune.fmt_params(best.params)}")
    return 0


def print_flush(text: str) -> None:
    print(text, flush=True)
    sys.stdout.flush()
