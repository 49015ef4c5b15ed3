"""One module per CLI subcommand: each exposes `add_parser(subparsers)` and `run(args)`. A command
calls only down (values from flags: tf_cluster.values; image builds: tf_cluster.imagebuild), never
another command (tests/unit/test_seams.py)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TypeAlias

#: what `add_parser` receives: the `tf-cluster` parser's subcommands
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def add_release_args(p: argparse.ArgumentParser) -> None:
    """The arguments naming a release already on a cluster (`status`, `logs`)."""
    p.add_argument("release", help="Helm release name")
    p.add_argument("-n", "--namespace", help="its namespace (default: the kubeconfig context's, else default)")
    p.add_argument("--kubeconfig", type=Path, help="default: $KUBECONFIG or ~/.kube/config (in a pod: its account)")
