"""`tf-cluster build`: placeholder until images/ lands (see issue 4)."""
from __future__ import annotations

from ..errors import UsageError


def add_parser(sub) -> None:
    p = sub.add_parser("build", help="build the training image (images/)")
    p.set_defaults(func=run)


def run(args) -> int:
    raise UsageError("tf-cluster build is not implemented yet")
