"""The progress protocol: the one reader of the lines a training program prints so
that any runner (local processes, a cluster's pod logs) can show how far it got.

    TF_CLUSTER_PROGRESS {"epoch": 2, "epochs": 5, "loss": 0.31, "accuracy": 0.9}
    TF_CLUSTER_EVENT {"event": "resumed", "epoch": 2, "step": 80}
    TF_CLUSTER_RESULT {"loss": ..., "accuracy": ..., "model_dir": ..., "chief": true}
    TF_CLUSTER_METRICS {"accuracy": "0.91", "global_step": "3", ...}

One JSON object per line after the marker. METRICS lines are printed by the chart's
launcher, not the program: each new report in the program's cloudml-hypertune metrics
file, so a pod's log carries it (they fill `TaskProgress.files`, never the program's own
progress). The chart's trainers print them
(charts/tf-cluster/files/trainers/common.py `emit`); any program may. A line that starts with a
marker but carries no JSON object is not a message (it is shown as plain output).

A program that does not speak the protocol still reports progress: Keras' own
`Epoch 3/5` lines and progress bars (`... - loss: 0.41 - accuracy: 0.86`) fill the
same fields, as long as no protocol message has been seen from that task. A program
that prints neither is read from the files it leaves (`TaskProgress.files`, filled by a
runner that can read them): the metrics file of Vertex AI's `cloudml-hypertune` library
(`hypertune_metrics`) and TensorBoard event files in the logs volume (`event_scalars`).
"""

from __future__ import annotations

import json
import math
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import require_extra

PREFIX = "TF_CLUSTER_"
KINDS = ("PROGRESS", "RESULT", "EVENT", "METRICS")
METRICS = ("loss", "accuracy", "val_loss", "val_accuracy")


@dataclass(frozen=True)
class Message:
    kind: str  # PROGRESS | RESULT | EVENT | METRICS
    data: dict[str, Any]  # the JSON object after the marker

    def describe(self) -> str:
        """The message in words, as run-local prints it."""
        metrics = "  ".join(f"{k} {v:.4f}" for k, v in self.data.items() if k in ("loss", "accuracy"))
        if self.kind == "PROGRESS":
            return f"epoch {self.data.get('epoch')}/{self.data.get('epochs')}  {metrics}"
        if self.kind == "EVENT":
            return f"{self.data.get('event')} at epoch {self.data.get('epoch')}"
        if self.kind == "METRICS":
            shown = hypertune_metrics(json.dumps(self.data))
            return "reported (hypertune): " + ", ".join(f"{k} {v:g}" for k, v in shown.items())
        where = f"  model -> {self.data['model_dir']}" if self.data.get("model_dir") else ""
        return f"finished: {metrics}{where}"


def parse(line: str) -> Message | None:
    """The message on one output line, or None."""
    line = line.strip()
    if not line.startswith(PREFIX):
        at = line.find(PREFIX + "METRICS {")  # the launcher's echo, after a progress bar left open
        if at < 0:
            return None
        line = line[at:]
    head, _, payload = line.partition(" ")
    kind = head[len(PREFIX) :]
    if kind not in KINDS:
        return None
    try:
        data = json.loads(payload)
    except ValueError:
        return None
    return Message(kind, data) if isinstance(data, dict) else None


BACKSPACE = "\x08"
# Terminal control sequences (CSI: colours, bold): Keras 3 draws its bar with them; a terminal shows none.
ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
KERAS_EPOCH = re.compile(r"^Epoch (\d+)/(\d+)\s*$")
# `loss: 0.4137`, `f1_score: 0.5`, `loss: 1.2345e-04`, and `loss: nan` / `inf` / `-inf` (Python's float format)
KERAS_METRIC = re.compile(r"\b([a-z_][a-z0-9_]*): (-?\d+(?:\.\d+)?(?:e[-+]?\d+)?|(?:nan|-?inf)\b)")
# tf_keras `12/50 [===`, Keras 3 `12/50 ━━━`, verbose=2 `50/50 -`; written to a pipe, a bar follows the previous
# update's last metric directly (`accuracy: 0.25004/4 [===`): Keras prints metrics with 4 decimals.
KERAS_BAR = re.compile(r"(?:(?<=\.\d{4})|(?<=\s)|^)(\d+)/(\d+) (?:\[|━|-)")
# Keras' time per step on an epoch's last update (`- 1s 16ms/step`, verbose=2 `- 25ms/step`)
KERAS_STEP_TIME = re.compile(r"\b(\d+)(s|ms|us)/step\b")
PER_SECOND = {"s": 1.0, "ms": 1e3, "us": 1e6}
READING_COUNTS = ("epoch", "epochs", "step")  # TaskProgress.reading(): integers; then these, then `metrics`
READING_RATES = ("loss", "steps_per_second", "examples_per_second")


def fold(line: str) -> str:
    """What a terminal would show of a line redrawn in place: the text after the last carriage
    return, backspaces applied, and of Keras progress bars written to a pipe (every update of an
    epoch on one line) only the last update; no colours."""
    line = ANSI.sub("", line.rstrip("\r").rsplit("\r", 1)[-1])
    while BACKSPACE in line:  # each backspace erases the character before it
        i = line.index(BACKSPACE)
        line = line[: max(i - 1, 0)] + line[i + 1 :]
    bars = [m.start() for m in KERAS_BAR.finditer(line)]
    return line[bars[-1] :] if len(bars) > 1 else line


def keras_metrics(line: str) -> dict[str, float]:
    """Metrics of a Keras progress line (`... - loss: 0.4137 - accuracy: 0.8500`), else {}."""
    line = ANSI.sub("", line)
    if " - " not in line or not KERAS_BAR.search(line):
        return {}
    return {k: float(v) for k, v in KERAS_METRIC.findall(fold(line)) if k not in ("eta",)}


def keras_pace(line: str, epoch: int) -> dict[str, float]:
    """Where a Keras progress line of epoch `epoch` (from 1) is: `step`, counted over the whole run
    (`12/50` in epoch 3 is step 112), and `steps_per_second` from its time per step, when shown."""
    shown = fold(line)
    bars = list(KERAS_BAR.finditer(shown))
    if not bars:
        return {}
    done, per_epoch = int(bars[-1].group(1)), int(bars[-1].group(2))
    out = {"step": float((epoch - 1) * per_epoch + done)}
    took = KERAS_STEP_TIME.search(shown, bars[-1].start())
    if took and int(took.group(1)) > 0:
        out["steps_per_second"] = PER_SECOND[took.group(2)] / int(took.group(1))
    return out


# cloudml-hypertune (github.com/GoogleCloudPlatform/cloudml-hypertune, hypertune/hypertune.py): every
# report rewrites this file with one JSON object per line, values as strings:
#   {"global_step": "1000", "accuracy": "0.987", "timestamp": 1525851440.1, "trial": "0"}
HYPERTUNE_FILE = "/tmp/hypertune/output.metrics"  # its default; CLOUD_ML_HP_METRIC_FILE overrides
HYPERTUNE_ENV = "CLOUD_ML_HP_METRIC_FILE"


def hypertune_metrics(text: str) -> dict[str, float]:
    """The latest value of every metric in a cloudml-hypertune metrics file, with its `step` (the
    library writes global_step "0" for a report that gave none: that is no step)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if not isinstance(entry, dict):
            continue
        for k, v in entry.items():
            if k in ("timestamp", "trial"):
                continue
            try:
                number = float(v)
            except (TypeError, ValueError):
                continue
            if k != "global_step":
                out[k] = number
            elif number:
                out["step"] = number
    return out


def hypertune_series(text: str) -> dict[str, dict[int, float]]:
    """Every report in a cloudml-hypertune metrics file (or METRICS line): metric -> {step: value}."""
    out: dict[str, dict[int, float]] = {}
    entries = []
    for line in text.splitlines():
        try:
            entry = json.loads(line)
            entries.append((int(float(entry.get("global_step") or 0)), entry))
        except (ValueError, AttributeError, TypeError):
            continue
    if len(entries) > 1 and not any(step for step, _ in entries):  # reported without global_step: in order
        entries = [(i + 1, entry) for i, (_, entry) in enumerate(entries)]
    for step, entry in entries:
        for k, v in entry.items():
            if k in ("timestamp", "trial", "global_step", "checkpoint_path"):
                continue
            try:
                out.setdefault(k, {})[step] = float(v)
            except (TypeError, ValueError):
                pass
    return out


def _records(path: Path):
    """The records of a TFRecord file (TensorBoard's event file format); a torn last record ends it."""
    data = path.read_bytes()
    i = 0
    while i + 12 <= len(data):
        (length,) = struct.unpack("<Q", data[i : i + 8])
        if i + 12 + length + 4 > len(data):
            return
        yield data[i + 12 : i + 12 + length]
        i += 12 + length + 4


def event_scalars(logdir: Path) -> dict[str, float]:
    """The latest value of every scalar in the TensorBoard event files under `logdir` (Keras'
    TensorBoard callback: `epoch_loss`, `epoch_accuracy`; `tf.summary.scalar`), with its `step`
    (and `epoch` when the step is Keras' epoch). Read with TensorBoard's own protobufs."""
    files = sorted(logdir.rglob("events.out.tfevents.*")) if logdir.is_dir() else []
    if not files:
        return {}
    require_extra("progress", "tensorboard", feature="reading progress from TensorBoard event files")
    from tensorboard.compat.proto import event_pb2
    from tensorboard.util import tensor_util

    latest: dict[str, tuple[int, float]] = {}
    for f in files:
        for record in _records(f):
            event = event_pb2.Event.FromString(record)
            for value in event.summary.value:
                if value.HasField("simple_value"):
                    number = float(value.simple_value)
                elif value.HasField("tensor") and not value.tensor.tensor_shape.dim:
                    try:
                        number = float(tensor_util.make_ndarray(value.tensor))
                    except (TypeError, ValueError):
                        continue
                else:
                    continue
                tag = value.tag.removeprefix("epoch_")
                if tag not in latest or event.step >= latest[tag][0]:
                    latest[tag] = (event.step, number)
    if not latest:
        return {}
    out = {tag: v for tag, (_, v) in latest.items()}
    out["step"] = max(step for step, _ in latest.values())
    return out


def scan(text: str) -> list[Message]:
    """Every message in a log, in order."""
    return [m for m in map(parse, text.splitlines()) if m]


@dataclass
class TaskProgress:
    """What one task has reported so far: its latest progress, its result, its events."""

    progress: dict[str, Any] = field(default_factory=dict)  # the latest PROGRESS: epoch, epochs, metrics
    result: dict[str, Any] = field(default_factory=dict)  # the RESULT: metrics, model_dir, chief
    events: list[dict[str, Any]] = field(default_factory=list)  # every EVENT: event, epoch, ...
    speaks_protocol: bool = False
    files: dict[str, float] = field(default_factory=dict)  # metrics read from files it wrote (hypertune, TensorBoard)
    reports: dict[str, dict[int, float]] = field(default_factory=dict)  # hypertune reports: metric -> {step: value}
    history: dict[str, dict[int, float]] = field(default_factory=dict)  # progress: metric -> {epoch: value}
    pace: dict[str, float] = field(default_factory=dict)  # from Keras' bar: step (over the run), steps_per_second
    _keras_epoch: tuple[int, int] | None = None
    _metrics_seen: int = 0

    def feed(self, line: str) -> Message | None:
        msg = parse(line)
        if msg is None:
            if not self.speaks_protocol:
                self._feed_keras(line)
            return None
        if msg.kind == "METRICS":  # the launcher's echo of the hypertune file: not the program speaking
            self.files.update(hypertune_metrics(json.dumps(msg.data)))
            self._metrics_seen += 1
            series = hypertune_series(json.dumps(msg.data))
            if all(set(steps) == {0} for steps in series.values()):  # no global_step: the report's number
                series = {k: {self._metrics_seen: v} for k, steps in series.items() for v in steps.values()}
            self.add_reports(series)
            return msg
        if not self.speaks_protocol:
            self.speaks_protocol, self.progress, self.pace = True, {}, {}
        if msg.kind == "PROGRESS":
            self.progress = msg.data
            self._remember(msg.data)
        elif msg.kind == "RESULT":
            self.result = msg.data
        else:
            self.events.append(msg.data)
        return msg

    def _feed_keras(self, line: str) -> None:
        epoch = KERAS_EPOCH.match(line.strip())
        if epoch:
            self._keras_epoch = (int(epoch.group(1)), int(epoch.group(2)))
            return
        metrics = keras_metrics(line)
        if metrics and self._keras_epoch:
            self.progress = {"epoch": self._keras_epoch[0], "epochs": self._keras_epoch[1], **metrics}
            self._remember(self.progress)
            self.pace = keras_pace(line, self._keras_epoch[0])

    def _remember(self, progress: dict[str, Any]) -> None:
        if not isinstance(progress.get("epoch"), int | float):
            return
        for k, v in progress.items():
            if k not in ("epoch", "epochs") and isinstance(v, int | float):
                self.history.setdefault(k, {})[int(progress["epoch"])] = float(v)

    def add_reports(self, series: dict[str, dict[int, float]]) -> None:
        for k, steps in series.items():
            self.reports.setdefault(k, {}).update(steps)

    @classmethod
    def of_log(cls, text: str) -> TaskProgress:
        state = cls()
        for line in text.splitlines():
            state.feed(line)
        return state

    def reading(self) -> dict[str, Any]:
        """The task's progress as numbers, as the chart's launcher exports it (`tf_cluster_task_*`;
        files/launcher.py reads the same lines by the same rules, tests/progress-corpus holds both to
        it): `epoch`, `epochs`, `step` (integers), `loss`, `steps_per_second`, `examples_per_second`
        and `metrics` (every other number), each only when known. Later sources win: Keras' bar
        (`pace`), the hypertune reports (`files`), the latest progress, the result."""
        numbers: dict[str, float] = {}
        for source in (self.pace, self.files, self.progress, self.result):
            for k, v in source.items():
                if isinstance(v, int | float) and not isinstance(v, bool):
                    numbers["step" if k == "global_step" else k] = float(v)
        out: dict[str, Any] = {}
        for k in READING_COUNTS:
            v = numbers.pop(k, None)
            if v is not None and math.isfinite(v):
                out[k] = int(v)
        out.update({k: numbers.pop(k) for k in READING_RATES if k in numbers})
        if numbers:
            out["metrics"] = dict(sorted(numbers.items()))
        return out

    def resumes(self) -> list[dict[str, Any]]:
        """The `resumed` events (BackupAndRestore after a restart: its epoch, and step if known), in order."""
        return [e for e in self.events if e.get("event") == "resumed" and "epoch" in e]

    def resumed_at(self) -> list[int]:
        """Epochs this task resumed at, in order."""
        return [int(e["epoch"]) for e in self.resumes()]

    def summary(self) -> str:
        """Latest progress in a few words: `epoch 3/5, loss 0.4100, accuracy 0.8800` or `-`."""
        p = self.progress
        if not p:
            return self._files_summary()
        parts = [f"epoch {p.get('epoch')}/{p.get('epochs')}"]
        parts += [f"{k} {p[k]:.4f}" for k in ("loss", "accuracy") if k in p]
        return ", ".join(parts)

    def _files_summary(self) -> str:
        """`step 300, loss 0.4100, accuracy 0.8800` from its files, else `-`."""
        f = self.files
        if not f:
            return "-"
        shown = [k for k in ("loss", "accuracy") if k in f] or [k for k in f if k != "step"][:3]
        parts = [f"step {int(f['step'])}"] if "step" in f else []
        return ", ".join(parts + [f"{k} {f[k]:.4f}" for k in shown])

    def outcome(self) -> str:
        """The final metrics (else the latest progress), and where training resumed."""
        text = ", ".join(f"{k}={v}" for k, v in self.result.items() if k in METRICS) or self.summary()
        if self.files and not self.result and self.progress:  # what it printed, and what it reported in files
            text += " (files: " + self._files_summary() + ")"
        resumed = self.resumes()
        if not resumed:
            return text
        step = f", step {resumed[-1]['step']}" if "step" in resumed[-1] else ""  # a save at a preemption
        return text + f" (resumed at epoch {resumed[-1]['epoch']}{step})"
