"""`tf-cluster run-local`: run the rendered cluster on this machine with real TensorFlow."""

from __future__ import annotations

import argparse
import os
import sys
import threading
from pathlib import Path

from .. import manifests, podlogs, requirements, roles, work_dir
from ..errors import RunError, require_extra
from ..localrun.local_cluster import LocalCluster
from ..localrun.local_runner import LocalRunner
from ..localrun.processes import Task, clean_workdir
from ..runner import RunReport
from ..values import add_render_args, render_docs
from . import Subparsers

NOISE = (
    "cpu_feature_guard",
    "To enable the following instructions",
    "absl::InitializeLog",
    "oneDNN custom operations",
    "TF_ENABLE_ONEDNN_OPTS",
    "rebuild TensorFlow with",
)


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "run-local", help="run the rendered cluster as local processes (real TensorFlow)", description=__doc__
    )
    add_render_args(p)
    p.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="run directory (default: runs/<release>): a new or empty one, or one an earlier run made (emptied first)",
    )
    p.add_argument("--timeout", type=float, default=900, help="seconds before everything is stopped")
    p.add_argument("--quiet", action="store_true", help="no live task logs, only status and summary")
    p.add_argument("--ignore-gpus", action="store_true", help="run roles that ask for GPUs on CPU")
    p.add_argument(
        "--no-retry",
        action="store_true",
        help="fail a task's Job on its first failure (backoffLimitPerIndex 0 for every role): for debugging",
    )
    p.add_argument(
        "--requirements",
        type=Path,
        metavar="FILE",
        help="pip requirements the program needs: installed once into a cached environment layered on "
        "this checkout's (for the image: tf-cluster build --requirements FILE)",
    )
    p.add_argument(
        "--no-isolation",
        action="store_true",
        help="run tasks as plain processes sharing this machine's /tmp (default: each in its pod's namespaces)",
    )
    p.add_argument(
        "--allow-image",
        action="append",
        default=[],
        metavar="REPO",
        help="run roles of this image with this machine's Python (repeatable)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not args.requirements:  # the tasks run under this Python: without TensorFlow each would die and be retried
        require_extra("local", "tensorflow", feature="tf-cluster run-local (real TensorFlow on this machine)")
    if args.no_retry:  # per role, so it wins over any jobPolicies.<role>.backoffLimitPerIndex
        args.set = [*args.set, *(f"jobPolicies.{r}.backoffLimitPerIndex=0" for r in roles.NAMES)]
    _, docs = render_docs(args)
    pods = manifests.pods(docs, namespace=args.namespace, node_cpus=os.cpu_count() or 1)
    workdir = (args.workdir or work_dir("runs") / args.release).resolve()
    clean_workdir(workdir, owned=args.workdir is None)  # before anything slow: a refused directory fails at once
    python = requirements.environment(args.requirements) if args.requirements else sys.executable

    print_lock = threading.Lock()

    def on_line(task: Task, line: str) -> None:
        if args.quiet or any(n in line for n in NOISE):
            return
        shown = podlogs.display(line)
        if shown is None:  # a redraw that erases itself (Keras' bar without a terminal)
            return
        with print_lock:  # one pump thread per task: keep lines whole
            sys.stdout.write(f"[{task.name}] {shown}\n")
            sys.stdout.flush()

    runner = LocalRunner(
        docs,
        pods,
        workdir,
        allow_images=tuple(args.allow_image),
        ignore_gpus=args.ignore_gpus,
        on_line=on_line,
        isolate=False if args.no_isolation else None,
        python=python,
    )
    cluster = runner.cluster
    print(
        f"tf-cluster run-local: {len(pods)} task(s) in {len(cluster.jobs)} Job(s) "
        f"({', '.join(f'{j.role}x{len(j.tasks)}' for j in cluster.jobs)}); run dir {workdir}",
        flush=True,
    )
    print(f"  isolation: {isolation(cluster)}", flush=True)
    for addr, local in cluster.address_map.items():
        print(f"  {addr} -> {local}")
    for task in cluster.tasks():
        if task.metrics_url:
            print(f"  {task.name} metrics -> {task.metrics_url}")
    report = runner.run(args.timeout, on_update=lambda text: print(text, flush=True))
    print(summary(report, workdir, cluster), flush=True)
    if not report.ok:
        for hint in cluster.shared_path_hints():
            print(f"Hint: {hint}", file=sys.stderr)
        if any(t.restarts for t in report.tasks) and not args.no_retry:
            print(
                "Tip: a task was retried before the run failed; `--no-retry` fails at the first error "
                "(quicker while debugging a program).",
                file=sys.stderr,
            )
        raise RunError(
            "the run did not complete: " + "; ".join(report.failures()) + f". Task logs are in {workdir / 'logs'}"
        )
    print("\nResult: every Job Complete.", file=sys.stderr)
    return 0


def isolation(cluster: LocalCluster) -> str:
    if cluster.isolated:
        return "each task in its pod's namespaces (read-only root, its own /tmp and emptyDirs, shared claims)"
    return (
        f"off ({cluster.isolation_problem}): tasks share this machine's /tmp, so a program that needs "
        "shared storage on Kubernetes may pass here"
    )


def summary(report: RunReport, workdir: Path, cluster: LocalCluster) -> str:
    lines = [f"\n== tf-cluster run-local finished in {report.seconds:.1f}s ==", report.table(), ""]
    model = report.model_dir()
    if model:
        here = next((cluster.host_path(t, model) for t in cluster.tasks() if t.reported.result.get("model_dir")), model)
        lines.append(f"Exported model:  {model}" + (f" (here: {here})" if here != model else ""))
    lines.append(f"Volumes:         {workdir / 'volumes'} (shared claims), {workdir / 'pods'} (per-pod emptyDirs)")
    private = cluster.private_files()
    if private:
        lines.append("Left in pod-private folders (gone with the pod on Kubernetes):")
        lines.extend(f"  {task}: {', '.join(entries)}" for task, entries in private.items())
    lines.append(f"Task logs:       {workdir / 'logs'}")
    return "\n".join(lines)
