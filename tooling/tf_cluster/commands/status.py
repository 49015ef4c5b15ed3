"""`tf-cluster status RELEASE`: how far a release running on a cluster got, as run-local and smoke show it.

    tf-cluster status tf -n ml                  # once: Jobs, one row per task, why tasks wait
    tf-cluster status tf -n ml --watch          # redrawn every 5 s until every Job finished (Ctrl-C stops)

Per task (role-index) its newest pod's state (pending with the scheduler's or the kubelet's
reason, running, succeeded, failed with its exit code and the rule that judged it), its
restarts (the Job's per-index failure count and container restarts), its time and the latest
epoch, loss and accuracy from its log; the Jobs with their conditions; why a gang waits; and the
latest lifecycle Events the tasks' launchers recorded (waited for peers, fenced, stopped).
The release's objects are found by the chart's label app.kubernetes.io/instance=RELEASE.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from .. import kube
from ..errors import UsageError
from ..runner import RunReport
from . import Subparsers, add_release_args


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "status",
        help="the status table of a release running on a cluster (state, restarts, epoch, loss per task)",
        description=__doc__.split("\n\n")[0],
    )
    add_release_args(p)
    p.add_argument(
        "-w", "--watch", action="store_true", help="redraw every --interval seconds until every Job finished"
    )
    p.add_argument("--interval", type=float, default=5.0, metavar="S", help="[--watch] seconds between redraws (5)")
    p.set_defaults(func=run)


def render(
    release: str, namespace: str, report: RunReport, gangs: list[str], finished: bool, events: Sequence[str] = ()
) -> str:
    """What `status` prints: a heading, the run's status (Jobs, tasks, why they wait), gangs, and
    the latest lifecycle Events the launchers recorded."""
    done = sum(t.state == "succeeded" for t in report.tasks)
    head = (
        f"release {release} in namespace {namespace}: {len(report.jobs)} Job(s), {done}/{len(report.tasks)} tasks done"
    )
    head += ", every Job finished" if finished else ""
    gang_part = ["", "Gangs:", *(f"  {line}" for line in gangs)] if gangs else []
    event_part = ["", "Events (latest, from the launchers):", *(f"  {line}" for line in events)] if events else []
    return "\n".join([head, "", report.status(), *gang_part, *event_part])


def run(args: argparse.Namespace) -> int:
    if not args.interval > 0:  # nan too: sleep(nan) raises
        raise UsageError(f"--interval {args.interval}: a number of seconds above 0")
    api, namespace = kube.connect(str(args.kubeconfig) if args.kubeconfig else None, args.namespace)
    redraw = args.watch and sys.stdout.isatty()
    try:
        while True:
            snap, report, gangs = kube.release_status(api, namespace, args.release)
            events = kube.launcher_events(api, namespace, snap.pods)
            text = render(args.release, namespace, report, gangs, snap.finished(), events)
            if redraw:
                sys.stdout.write("\x1b[H\x1b[2J")  # home, clear: the table redrawn in place
            elif args.watch:
                text = f"--- {time.strftime('%H:%M:%S')}\n{text}"
            print(text, flush=True)
            if not args.watch or snap.finished():
                return 0
            time.sleep(args.interval)
    except KeyboardInterrupt:  # the way to stop watching: not an error
        return 0
