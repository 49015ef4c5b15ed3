"""`tf-cluster completion`: the shell completion script (argcomplete's), for bash or zsh.

eval "$(tf-cluster completion bash)"      # in ~/.bashrc
eval "$(tf-cluster completion zsh)"       # in ~/.zshrc
"""

from __future__ import annotations

import argparse

from . import Subparsers


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "completion",
        help='shell completion: eval "$(tf-cluster completion bash)" (or zsh)',
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("shell", choices=["bash", "zsh"])
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import argcomplete

    print(argcomplete.shellcode(["tf-cluster"], shell=args.shell), end="")
    return 0
