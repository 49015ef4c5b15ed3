"""`tf-cluster from-tfjob`: Kubeflow TFJob manifests -> tf-cluster values files, each checked by
rendering the chart and comparing every task's TF_CONFIG with what the TFJob controller gives."""

from __future__ import annotations

import shlex
import sys
import tempfile
from pathlib import Path

import yaml

from .. import helm, tfjob
from ..errors import RenderError, UsageError


def add_parser(sub) -> None:
    p = sub.add_parser(
        "from-tfjob",
        help="convert Kubeflow TFJob manifests to values files",
        description="Convert TFJob manifests (files, - for stdin, or `kubectl get tfjob -o yaml` output) to "
        "tf-cluster values. Every TFJob field with no equivalent, or whose meaning changes, is printed on "
        "stderr with what happens instead; each values file is rendered and every task's TF_CONFIG compared "
        "with the TFJob controller's.",
    )
    p.add_argument("manifests", nargs="+", metavar="FILE", help="TFJob manifest(s); - reads stdin")
    p.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="PATH",
        help="values file to write (one TFJob), or a folder for <name>.yaml files (several); default: stdout",
    )
    p.add_argument(
        "--entrypoint",
        metavar="CMD",
        help="the image's ENTRYPOINT, for containers that set no command (TFJob ran it; the chart's launcher "
        "starts the command itself), e.g. 'python /var/tf_dist_mnist/dist_mnist.py'",
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


def run(args) -> int:
    found = [(job, src) for text, src in map(read, args.manifests) for job in tfjob.load(text, src)]
    if len(found) > 1 and (args.output is None or args.output.suffix in (".yaml", ".yml")):
        raise UsageError(f"{len(found)} TFJobs: give -o FOLDER to write one values file per TFJob")
    entrypoint = shlex.split(args.entrypoint) if args.entrypoint else None
    for manifest, source in found:
        conv = tfjob.convert(manifest, entrypoint=entrypoint, gang=args.gang or "")
        text = tfjob.to_yaml(conv)
        print(f"{source}: TFJob {conv.name} -> {len(conv.notes)} note(s):", file=sys.stderr)
        sys.stderr.write(tfjob.notes_text(conv.notes))
        check(conv, args.helm)
        if args.output is None:
            sys.stdout.write(text)
        else:
            names = [(j.get("metadata") or {}).get("name") for j, _ in found]
            stem = conv.name if names.count(conv.name) == 1 else f"{conv.namespace or 'default'}-{conv.name}"
            out = args.output / f"{stem}.yaml" if len(found) > 1 or args.output.is_dir() else args.output
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text)
            print(f"wrote {out}", file=sys.stderr)
    return 0


def check(conv: tfjob.Conversion, major: str) -> None:
    """Render the converted values and compare every task's TF_CONFIG with the TFJob controller's."""
    values = dict(conv.values)
    if not values.get("command") and not any(r.get("command") for r in values["roles"].values()):
        values["command"] = ["<entrypoint>"]  # only for this check: the file keeps it empty
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
