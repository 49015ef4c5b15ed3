"""`tf-cluster run-local`: run the rendered cluster on this machine with real TensorFlow."""
from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

from .. import ROOT, manifests
from ..errors import RunError
from ..local import LocalCluster, clean_workdir
from .render import add_render_args, render_docs

NOISE = ("cpu_feature_guard", "To enable the following instructions", "absl::InitializeLog",
         "oneDNN custom operations", "TF_ENABLE_ONEDNN_OPTS", "rebuild TensorFlow with")


def add_parser(sub) -> None:
    p = sub.add_parser("run-local", help="run the rendered cluster as local processes (real TensorFlow)",
                       description=__doc__)
    add_render_args(p)
    p.add_argument("--workdir", type=Path, default=None,
                   help="run directory (default: runs/<release>); emptied first")
    p.add_argument("--timeout", type=float, default=900, help="seconds before everything is stopped")
    p.add_argument("--quiet", action="store_true", help="no live task logs, only status and summary")
    p.add_argument("--ignore-gpus", action="store_true", help="run roles that ask for GPUs on CPU")
    p.add_argument("--allow-image", action="append", default=[], metavar="REPO",
                   help="run roles of this image with this machine's Python (repeatable)")
    p.set_defaults(func=run)


def fmt_progress(task) -> str:
    p = task.progress
    if not p:
        return "-"
    parts = [f"epoch {p.get('epoch')}/{p.get('epochs')}"]
    for key in ("loss", "accuracy"):
        if key in p:
            parts.append(f"{key} {p[key]:.4f}")
    return ", ".join(parts)


def human(line: str) -> str:
    """A trainer's machine-readable line, in words."""
    kind, payload = line.split(" ", 1)
    data = json.loads(payload)
    metrics = "  ".join(f"{k} {v:.4f}" for k, v in data.items() if k in ("loss", "accuracy"))
    if kind == "TF_CLUSTER_PROGRESS":
        return f"epoch {data.get('epoch')}/{data.get('epochs')}  {metrics}"
    if kind == "TF_CLUSTER_EVENT":
        return f"{data.get('event')} at epoch {data.get('epoch')}"
    where = f"  model -> {data['model_dir']}" if data.get("model_dir") else ""
    return f"finished: {metrics}{where}"


def status_table(cluster: LocalCluster) -> str:
    now = time.monotonic()
    rows = [("TASK", "STATE", "RESTARTS", "TIME", "PROGRESS")]
    for t in cluster.tasks():
        end = t.ended if t.state in ("succeeded", "failed") else now
        rows.append((t.name, t.state, str(t.failures), f"{end - t.first_start:5.1f}s", fmt_progress(t)))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r[:4], widths)) + "  " + r[4] for r in rows)


def summary(cluster: LocalCluster, wall: float, workdir: Path) -> str:
    lines = [f"\n== tf-cluster run-local finished in {wall:.1f}s =="]
    for job in cluster.jobs:
        lines.append(f"Job {job.name}: {job.condition}" + (f" ({job.reason})" if job.reason else ""))
    lines.append("")
    rows = [("TASK", "EXIT CODES", "RESTARTS", "WALL", "RESULT")]
    for t in cluster.tasks():
        result = ", ".join(f"{k}={v}" for k, v in t.result.items()
                           if k in ("loss", "accuracy", "val_loss", "val_accuracy")) or fmt_progress(t)
        resumed = [e for e in t.events if e.get("event") == "resumed"]
        if resumed:
            result += f" (resumed at epoch {resumed[-1]['epoch']})"
        rows.append((t.name, ",".join(map(str, t.exit_codes)) or "-", str(t.failures),
                     f"{(t.ended or time.monotonic()) - t.first_start:.1f}s", result))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r[:4], widths)) + "  " + r[4] for r in rows]
    models = [t.result["model_dir"] for t in cluster.tasks() if t.result.get("model_dir")]
    lines.append("")
    if models:
        lines.append(f"Exported model:  {models[0]}")
    lines.append(f"Volumes:         {workdir / 'volumes'} (shared claims), {workdir / 'pods'} (per-pod emptyDirs)")
    lines.append(f"Task logs:       {workdir / 'logs'}")
    return "\n".join(lines)


def run(args) -> int:
    _, docs = render_docs(args)
    pods = manifests.pods(docs, namespace=args.namespace, node_cpus=os.cpu_count() or 1)
    workdir = (args.workdir or ROOT / "runs" / args.release).resolve()
    clean_workdir(workdir)

    print_lock = threading.Lock()

    def on_line(task, line):
        if args.quiet or any(n in line for n in NOISE):
            return
        if line.startswith(("TF_CLUSTER_PROGRESS ", "TF_CLUSTER_RESULT ", "TF_CLUSTER_EVENT ")):
            line = human(line)
        with print_lock:  # one pump thread per task: keep lines whole
            sys.stdout.write(f"[{task.name}] {line}\n")
            sys.stdout.flush()

    cluster = LocalCluster(docs, pods, workdir, allow_images=tuple(args.allow_image),
                           ignore_gpus=args.ignore_gpus, on_line=on_line)
    cluster.write_configmaps(docs)
    print(f"tf-cluster run-local: {len(pods)} task(s) in {len(cluster.jobs)} Job(s) "
          f"({', '.join(f'{j.role}x{len(j.tasks)}' for j in cluster.jobs)}); run dir {workdir}", flush=True)
    for addr, local in cluster.address_map.items():
        print(f"  {addr} -> {local}")
    start = time.monotonic()
    ok = cluster.run(args.timeout, tick=lambda c: print("\n" + status_table(c) + "\n", flush=True))
    print(summary(cluster, time.monotonic() - start, workdir), flush=True)
    if not ok:
        failed = [f"{j.name}: {j.reason or j.condition}" for j in cluster.jobs if j.condition != "Complete"]
        raise RunError("the run did not complete: " + "; ".join(failed) +
                       f". Task logs are in {workdir / 'logs'}")
    print("\nResult: every Job Complete.", file=sys.stderr)
    return 0
