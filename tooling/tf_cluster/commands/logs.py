"""`tf-cluster logs RELEASE`: every task's log of a release on a cluster, merged, each line under its task.

    tf-cluster logs tf -n ml                    # every pod's log so far, in time order
    tf-cluster logs tf -n ml -f                 # follow every task (replacements too) until every Job ended
    tf-cluster logs tf -n ml --role worker --since 10m

Lines are shown as run-local prints them: `[worker-1] ...`, progress messages in words and
Keras' progress bars as their last update (`--raw`: as written). A task's earlier pods (before
a restart) are included.
"""

from __future__ import annotations

import argparse
import sys

from .. import cluster_state, kube, podlogs, roles
from . import Subparsers, add_release_args


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "logs",
        help="every task's log of a release on a cluster, merged, each line under [role-i]",
        description=__doc__.split("\n\n")[0],
    )
    add_release_args(p)
    p.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help="stream every task's log (pods created later too) until every Job finished",
    )
    p.add_argument(
        "--role", action="append", default=[], choices=roles.NAMES, help="only this role's tasks (repeatable)"
    )
    p.add_argument("--since", metavar="DURATION", help="only lines newer than this (30s, 5m, 1h)")
    p.add_argument("--raw", action="store_true", help="lines as the program wrote them")
    p.set_defaults(func=run)


def note(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    since = podlogs.seconds(args.since) if args.since else None
    api, namespace = kube.connect(str(args.kubeconfig) if args.kubeconfig else None, args.namespace)
    snap = kube.read_release(api, namespace, args.release)
    if args.follow:
        follower = podlogs.Follower(
            list_pods=lambda: podlogs.pods_of(api, namespace, args.release, args.role),
            open_log=lambda pod, first: podlogs.stream_log(api, namespace, pod, since if first else None),
            say=lambda line: print(line, flush=True),
            note=note,
            raw=args.raw,
        )
        try:
            follower.run()
        except KeyboardInterrupt:  # the way to stop following: not an error
            pass
        return 0
    logs = []
    for pod in podlogs.of_roles(snap, args.role):
        task = podlogs.task_name(pod)
        if not podlogs.started(pod):
            state, detail, _ = cluster_state.pod_state(pod)
            note(f"[{task}] no log yet: pod {pod.metadata.name} {state}" + (f" ({detail})" if detail else ""))
            continue
        try:
            logs.append((task, podlogs.read_log(api, namespace, pod, since)))
        except Exception as e:  # noqa: BLE001 - one pod's log missing (its node gone) must not hide the others
            note(f"[{task}] cannot read the log of pod {pod.metadata.name}: {e}")
    for line in podlogs.merged(logs, raw=args.raw):
        print(line)
    return 0
