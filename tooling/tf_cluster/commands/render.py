"""`tf-cluster render`: helm template, optionally as a table of every pod's TF_CONFIG."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from .. import helm, manifests
from ..errors import UsageError


def add_parser(sub) -> None:
    p = sub.add_parser(
        "render", help="render the chart (helm template)", description="Render the chart with the real helm binary."
    )
    add_render_args(p)
    p.add_argument(
        "--tf-config", action="store_true", help="print one row per pod with its TF_CONFIG (index substituted)"
    )
    p.set_defaults(func=run)


def add_values_args(p: argparse.ArgumentParser, *, required: bool = False) -> None:
    """Helm's own values flags, and --script, as every command that renders or installs takes them."""
    p.add_argument(
        "-f", "--values", action="append", default=[], type=Path, metavar="FILE", help="values file (repeatable)"
    )
    for name, flag in helm.Values.FLAGS[1:]:  # --set, --set-string, --set-file, --set-json: Helm's own
        p.add_argument(flag, action="append", default=[], dest=name, metavar="K=V", help=f"helm {flag} (repeatable)")
    p.add_argument(
        "--script",
        type=Path,
        metavar="FILE",
        help="run this Python file in every task: it lands in code.files and every role runs "
        "`python3 $(CODE_DIR)/<name> ARGS` (ARGS after --)",
    )
    p.add_argument("script_args", nargs="*", metavar="ARGS", help="arguments for --script (after --)")
    p.add_argument("--helm", choices=helm.MAJORS, default="4", help="Helm major version (default 4)")
    if required:
        p.set_defaults(values_required=True)


def values_from(args) -> helm.Values:
    """The values a command's flags ask for; --script becomes code.files + command + args."""
    if args.script_args and not args.script:
        raise UsageError(f"arguments {' '.join(args.script_args)!r} given without --script FILE")
    if getattr(args, "values_required", False) and not (args.values or args.script):
        raise UsageError("give a values file (-f FILE) or a program (--script FILE)")
    values = helm.Values.of(args.values, args.set, args.set_string, args.set_file, args.set_json)
    return values.plus(script_values(args.script, args.script_args)) if args.script else values


def script_values(script: Path, script_args: list[str]) -> helm.Values:
    """A local program as chart values: its text in `code.files.<name>` (mounted at code.mountPath,
    exported as CODE_DIR), and every role's command `python3 $(CODE_DIR)/<name>` with these args.
    Roles that set their own `command` keep it."""
    if not script.is_file():
        raise UsageError(f"--script {script}: no such file")
    if not re.fullmatch(r"[-._a-zA-Z0-9]+", script.name):
        raise UsageError(f"--script {script}: a file name of letters, digits, '.', '_' and '-' only, please")
    key = script.name.replace(".", "\\.")
    return helm.Values(
        set_file=(f"code.files.{key}={script}",),
        set_json=(
            f"command={json.dumps(['python3', f'$(CODE_DIR)/{script.name}'])}",
            f"args={json.dumps(list(script_args))}",
        ),
    )


def add_render_args(p: argparse.ArgumentParser) -> None:
    add_values_args(p)
    p.add_argument("--release", default="tf", help="release name (default: tf)")
    p.add_argument("-n", "--namespace", default="default")


def render_docs(args) -> tuple[str, list[dict]]:
    text = helm.Helm(args.helm, namespace=args.namespace).template(args.release, values_from(args))
    return text, helm.parse(text)


def run(args) -> int:
    text, docs = render_docs(args)
    if args.tf_config:
        print(manifests.tf_config_table(manifests.pods(docs, namespace=args.namespace)))
    else:
        sys.stdout.write(text)
    return 0
