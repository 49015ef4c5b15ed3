"""`tf-cluster` command line. Exit codes: 0 ok, 1 the cluster refused or failed a request, 2 usage
(also a version-policy or packaging refusal, or no such release), 3 tool missing, 4 render refused,
5 invalid manifests, 6 build failed, 7 run failed (run-local or smoke)."""

from __future__ import annotations

import argparse
import sys

from . import version
from .commands import build, from_tfjob, logs, package, render, run_local, smoke, status, tune, validate
from .errors import TfClusterError


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tf-cluster", description=__doc__)
    p.add_argument("--version", action="version", version=f"tf-cluster {version()}")
    sub = p.add_subparsers(dest="command", required=True)
    for module in (render, validate, build, run_local, smoke, status, logs, package, tune, from_tfjob):
        module.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:2] == ["tune", "show"]:  # `tf-cluster tune show STUDY`
        argv = ["tune-show", *argv[2:]]
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except TfClusterError as e:
        print(f"tf-cluster {args.command}: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print(f"tf-cluster {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
