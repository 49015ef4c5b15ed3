"""`tf-cluster from-tfjob`: Kubeflow TFJob manifests -> tf-cluster values files, each checked by
rendering the chart and comparing every task's TF_CONFIG with what the TFJob controller gives."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from .. import helm, imageconfig, tfjob
from ..errors import RenderError, UsageError
from . import Subparsers


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "from-tfjob",
        help="convert Kubeflow TFJob manifests to values files",
        description="Convert TFJob manifests (files, - for stdin, or `kubectl get tfjob -o yaml` output) to "
        "tf-cluster values. Every TFJob field with no equivalent, or whose meaning changes, is printed on "
        "stderr with what happens instead; each values file is rendered with the chart (its schema, as "
        "`helm install` checks it) and every task's TF_CONFIG compared with the TFJob controller's. A "
        "container that sets no command ran its image's ENTRYPOINT under TFJob; the chart's launcher starts "
        "the command itself, so from-tfjob reads the image's ENTRYPOINT and CMD (command = ENTRYPOINT + the "
        "container's args, or CMD when it gives none, as Kubernetes runs them): from the local podman store "
        f"(docker's when there is no podman), else from the image's registry (at most "
        f"{imageconfig.REGISTRY_TIMEOUT:.0f} s; credentials from "
        "$REGISTRY_AUTH_FILE, $XDG_RUNTIME_DIR/containers/auth.json, ~/.docker/config.json), and prints where "
        "it found them. When it finds none it writes nothing and says where it looked: give --entrypoint.",
    )
    p.add_argument("manifests", nargs="+", metavar="FILE", help="TFJob manifest(s); - reads stdin")
    p.add_argument(
        "-o",
        "--output",
        metavar="PATH",
        help="values file to write (one TFJob), or a folder for <name>.yaml files (several TFJobs, an existing "
        "folder, or a PATH ending in /); default: stdout",
    )
    p.add_argument(
        "--entrypoint",
        metavar="CMD",
        help="the command for containers that set no command, as one shell-quoted string: the image's "
        "ENTRYPOINT (the container's args still follow it), e.g. 'python /var/tf_dist_mnist/dist_mnist.py'. "
        "Given, no image is looked up; default: read from the image",
    )
    p.add_argument(
        "--insecure-registry",
        action="append",
        default=[],
        metavar="HOST[:PORT]",
        help="read image configs from this registry over plain HTTP (a local registry); repeatable",
    )
    p.add_argument(
        "--gang",
        choices=("kubernetes", "volcano", "coscheduling"),
        help="gang mechanism for a runPolicy.schedulingPolicy (default: volcano when it names a queue, "
        "else the Kubernetes PodGroup)",
    )
    p.add_argument("--helm", choices=helm.MAJORS, default="4", help="Helm major version for the check (default 4)")
    p.set_defaults(func=run)


def read(path: str) -> tuple[str, str]:
    if path == "-":
        return sys.stdin.read(), "<stdin>"
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"{path}: no such file")
    return p.read_text(), path


def run(args: argparse.Namespace) -> int:
    found = [(job, src) for text, src in map(read, args.manifests) for job in tfjob.load(text, src)]
    output = None if args.output is None else Path(args.output)  # drops a trailing "/": read from args.output
    if len(found) > 1 and (output is None or output.suffix in (".yaml", ".yml")):
        raise UsageError(f"{len(found)} TFJobs: give -o FOLDER to write one values file per TFJob")
    entrypoint = shlex.split(args.entrypoint) if args.entrypoint else None
    looked_up: dict[str, imageconfig.ImageConfig] = {}
    converted = []
    for manifest, source in found:  # every one converted and checked before any file is written
        conv = tfjob.convert(manifest, entrypoint=entrypoint, gang=args.gang or "")  # the manifest's errors first
        if not entrypoint and tfjob.images_without_command(manifest):
            images = image_configs(manifest, looked_up, args.insecure_registry)
            conv = tfjob.convert(manifest, gang=args.gang or "", images=images)
        print(f"{source}: TFJob {conv.name} -> {len(conv.notes)} note(s):", file=sys.stderr)
        sys.stderr.write(tfjob.notes_text(conv.notes))
        check(conv, args.helm)
        converted.append(conv)
    names = [(j.get("metadata") or {}).get("name") for j, _ in found]
    for conv in converted:
        text = tfjob.to_yaml(conv)
        if output is None:
            sys.stdout.write(text)
            continue
        stem = conv.name if names.count(conv.name) == 1 else f"{conv.namespace or 'default'}-{conv.name}"
        folder = len(found) > 1 or output.is_dir() or args.output.endswith(("/", os.sep))
        out = output / f"{stem}.yaml" if folder else output
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
        print(f"wrote {out}", file=sys.stderr)
    return 0


def image_configs(
    manifest: dict[str, Any], looked_up: dict[str, imageconfig.ImageConfig], insecure: list[str]
) -> dict[str, imageconfig.ImageConfig]:
    """ENTRYPOINT/CMD of each image whose container sets no command; refused, naming the flag, when any is
    not found."""
    name = str((manifest.get("metadata") or {}).get("name") or "")
    missing = tfjob.images_without_command(manifest)
    failed = []
    for image in missing:
        if image not in looked_up:
            try:
                looked_up[image] = imageconfig.lookup(image, insecure=insecure)
            except imageconfig.NotFound as e:
                failed.append(e)
                continue
            print(f"[from-tfjob] {image}: {looked_up[image].describe()}", file=sys.stderr)
    if failed:
        raise UsageError(not_found_message(name, missing, failed))
    return {image: looked_up[image] for image in missing}


def not_found_message(name: str, missing: dict[str, list[str]], failed: list[imageconfig.NotFound]) -> str:
    lines = [
        f"TFJob {name}: the tensorflow container of "
        + "; ".join(f"{', '.join(missing[e.image])} ({e.image})" for e in failed)
        + " sets no command: TFJob ran the image's ENTRYPOINT, and tf-cluster's launcher needs it as the "
        "command. No ENTRYPOINT or CMD was found:"
    ]
    for e in failed:
        lines += [f"  {e.image}:", *(f"    {where}" for where in e.tried)]
        if e.plain_http:
            lines.append(f"    (a plain-HTTP registry? add --insecure-registry {e.plain_http})")
    lines += [
        "Give the command (the image's ENTRYPOINT, then its CMD if the container sets no args) with:",
        "  --entrypoint 'python /path/to/train.py'",
        "(`podman image inspect IMAGE --format '{{.Config.Entrypoint}} {{.Config.Cmd}}'` shows them where the "
        "image is). No values file was written.",
    ]
    return "\n".join(lines)


def check(conv: tfjob.Conversion, major: str) -> None:
    """Render the converted values as written (the chart's schema: what `helm install` refuses, such as an
    empty command, is refused here) and compare every task's TF_CONFIG with the TFJob controller's."""
    values = conv.values  # as written: `helm install` checks the same schema
    namespace = conv.namespace or "default"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "values.yaml"
        path.write_text(yaml.safe_dump(values))
        try:
            text = helm.Helm(major, namespace=namespace).template(conv.name, helm.Values.of([path]))
        except RenderError as e:
            raise RenderError(f"the values converted from TFJob {conv.name} do not render: {e}") from None
    problems = tfjob.compare(conv.tfjob, helm.parse(text), namespace)
    if problems:
        raise RenderError(
            f"TF_CONFIG of TFJob {conv.name} differs beyond the documented differences:\n  " + "\n  ".join(problems)
        )
    tasks = sum(r["replicas"] for r in conv.values["roles"].values())
    print(
        f"TF_CONFIG: {tasks} task(s) match the TFJob controller's, apart from: {'; '.join(tfjob.DIFFERENCES)}",
        file=sys.stderr,
    )
