"""What the local tasks left behind, read after (or while) they ran: the files they reported
progress in, what they wrote to folders private to their pod, and hints for a task that looked
for a path another pod has."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from .. import progress
from ..errors import ToolMissing
from .processes import Task, host_path, hypertune_file

STORAGE_VOLUMES = ("data", "checkpoints", "logs")  # the chart's storage.<volume> (_storage.tpl)
HOUSEKEEPING = {"__pycache__", ".keras", ".cache", ".config"}  # TF/Keras/pip own files in $HOME=/tmp
MISSING = re.compile(r"NotFound|No such file or directory|not found|does not exist|Failed to find", re.I)
ABS_PATH = re.compile(r"(?<![\w.:/])(/[\w.@+=-]+(?:/[\w.@+=-]+)*)")


def read_progress_files(
    tasks: list[Task], workdir: Path, summary_task: Task | None, *, only_silent: bool, events: bool
) -> str:
    """Fill each task's `reported.files` from files it wrote: a cloudml-hypertune metrics file in
    its own /tmp (isolated runs), and for `summary_task` (the first of the leading Job: it writes
    the summaries) TensorBoard event files under its LOG_DIR, when `events`. `only_silent`: skip
    tasks whose output already shows progress. Returns why event files cannot be read (the
    `progress` extra missing), or ''."""
    no_events = ""
    for t in tasks:
        if only_silent and t.reported.progress:
            continue
        found: dict[str, float] = {}
        log_dir = t.env.get("LOG_DIR")
        if t is summary_task and log_dir and events and not no_events:
            try:
                found.update(progress.event_scalars(Path(host_path(t, log_dir))))
            except ToolMissing as e:  # the run goes on; only the summaries' progress is not read
                no_events = str(e)
                print(f"run-local: {e}", file=sys.stderr, flush=True)
        if t.mounts:  # isolated: its /tmp is its own
            metrics = Path(host_path(t, t.env.get(progress.HYPERTUNE_ENV) or progress.HYPERTUNE_FILE))
        else:
            metrics = Path(t.env.get(progress.HYPERTUNE_ENV) or hypertune_file(workdir, t.name))
        if metrics.is_file():
            text = metrics.read_text(errors="replace")
            found.update(progress.hypertune_metrics(text))
            t.reported.add_reports(progress.hypertune_series(text))
        if found:
            t.reported.files = {**t.reported.files, **found}  # one assignment: readers in other threads
    return no_events


def private_files(tasks: list[Task]) -> dict[str, list[str]]:
    """Per task, what it left in folders private to its pod (/tmp, emptyDirs), as the pod saw
    them: ["/tmp/ckpt (12 files)", ...]. Lost with the pod on Kubernetes."""
    out: dict[str, list[str]] = {}
    for t in tasks:
        entries = []
        for m in t.mounts:
            src = Path(m.source)
            if not m.private or not src.is_dir():
                continue
            for child in sorted(src.iterdir()):
                if child.name in HOUSEKEEPING:
                    continue
                n = sum(1 for f in child.rglob("*") if f.is_file()) if child.is_dir() else 1
                entries.append(f"{m.target.rstrip('/')}/{child.name} ({n} file{'s' if n != 1 else ''})")
        if entries:
            out[t.name] = entries
    return out


def shared_path_hints(tasks: list[Task]) -> list[str]:
    """For each path a failed task could not find under a folder private to its pod: which tasks
    have it, and where the file belongs instead. One hint per path."""
    shared = sorted({m.target for t in tasks for m in t.mounts if not m.private and not m.readonly})
    seen: set[str] = set()
    hints = []
    for t in tasks:
        if not any(t.exit_codes) or not t.log_path.exists():
            continue
        for path in missing_paths(t.log_path.read_text(errors="replace")):
            private = next((m for m in t.mounts if m.private and _under(path, m.target)), None)
            if not private or path in seen:
                continue
            seen.add(path)
            holders = [
                o.name for o in tasks if o is not t and host_path(o, path) != path and _near(Path(host_path(o, path)))
            ]
            if private.volume in STORAGE_VOLUMES:
                fix = (
                    f"storage.{private.volume}.type is emptyDir, one copy per pod: set it to pvc "
                    f"(or existingClaim) so every task shares {private.target}"
                )
            elif shared:
                fix = f"write it under a shared volume ({', '.join(shared)} here)"
            else:
                fix = (
                    "Give the release shared storage (storage.checkpoints.type=pvc, mounted at "
                    "/mnt/checkpoints) and write it under CHECKPOINT_DIR or MODEL_DIR"
                )
            hints.append(
                f"{t.name} could not find {path}"
                + (f" (it is in {', '.join(holders)}'s own {private.target})" if holders else "")
                + f": {private.target} is private to each pod, here as on Kubernetes. {fix}."
            )
            break
    return hints


def missing_paths(log: str) -> list[str]:
    """Absolute paths on log lines that say something was not found, first seen first."""
    return list(dict.fromkeys(p for line in log.splitlines() if MISSING.search(line) for p in ABS_PATH.findall(line)))


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _near(local: Path) -> bool:
    """The path, or the folder it would be in, exists (a sharded write leaves its folder)."""
    return local.exists() or (local.parent.exists() and any(local.parent.iterdir()))
