"""One module per CLI subcommand: each exposes `add_parser(subparsers)` and `run(args)`. A command
calls only down (values from flags: tf_cluster.values; image builds: tf_cluster.imagebuild), never
another command (tests/unit/test_seams.py)."""

from __future__ import annotations

import argparse
from typing import TypeAlias

#: what `add_parser` receives: the `tf-cluster` parser's subcommands
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
