"""Chart values from the command line, as every command that renders or installs takes them: Helm's
own values flags (-f, --set, --set-string, --set-file, --set-json), a program given with --script
(its text in code.files, every role's command running it), the Helm major version, and the release
rendered from them. The commands call these; nothing here knows which command asked."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

from . import helm
from .errors import UsageError, yaml_problem

#: A rendered Kubernetes object as `helm.parse` gives it (apiVersion, kind, metadata, ...).
Manifest = dict[str, Any]


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


def add_render_args(p: argparse.ArgumentParser) -> None:
    """The values flags plus the release name and namespace: what `render_docs` reads."""
    add_values_args(p)
    p.add_argument("--release", default="tf", help="release name (default: tf)")
    p.add_argument("-n", "--namespace", default="default")


def values_from(args: argparse.Namespace) -> helm.Values:
    """The values a command's flags ask for; --script becomes code.files + command + args."""
    script: Path | None = args.script
    script_args: list[str] = args.script_args
    if script_args and not script:
        raise UsageError(f"arguments {' '.join(script_args)!r} given without --script FILE")
    if getattr(args, "values_required", False) and not (args.values or script):
        raise UsageError("give a values file (-f FILE) or a program (--script FILE)")
    for f in args.values:
        check_values_file(f)
    values = helm.Values.of(args.values, args.set, args.set_string, args.set_file, args.set_json)
    return values.plus(script_values(script, script_args)) if script else values


def check_values_file(path: Path) -> None:
    """A values file that is there and is a YAML mapping (or empty), else a UsageError naming it."""
    import yaml

    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise UsageError(f"values file {path}: no such file") from None
    except OSError as e:
        raise UsageError(f"values file {path}: cannot read it ({e.strerror})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        where, problem = yaml_problem(e)
        at = f" ({where})" if where else ""
        raise UsageError(f"values file {path} is not valid YAML{at}: {problem}") from None
    if data is not None and not isinstance(data, dict):
        raise UsageError(f"values file {path}: expected a mapping of values (key: value), got a {type(data).__name__}")


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


def render_docs(args: argparse.Namespace) -> tuple[str, list[Manifest]]:
    """`helm template` of the release the flags of `add_render_args` name: its text and its documents."""
    text = helm.Helm(args.helm, namespace=args.namespace).template(args.release, values_from(args))
    return text, helm.parse(text)
