"""The progress protocol: the one reader of the lines a training program prints so
that any runner (local processes, a cluster's pod logs) can show how far it got.

    TF_CLUSTER_PROGRESS {"epoch": 2, "epochs": 5, "loss": 0.31, "accuracy": 0.9}
    TF_CLUSTER_EVENT {"event": "resumed", "epoch": 2}
    TF_CLUSTER_RESULT {"loss": ..., "accuracy": ..., "model_dir": ..., "chief": true}

One JSON object per line after the marker. The chart's trainers print them
(images/trainers/common.py `emit`); any program may. A line that starts with a
marker but carries no JSON object is not a message (it is shown as plain output).

A program that does not speak the protocol still reports progress: Keras' own
`Epoch 3/5` lines and progress bars (`... - loss: 0.41 - accuracy: 0.86`) fill the
same fields, as long as no protocol message has been seen from that task.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

PREFIX = "TF_CLUSTER_"
KINDS = ("PROGRESS", "RESULT", "EVENT")
METRICS = ("loss", "accuracy", "val_loss", "val_accuracy")


@dataclass(frozen=True)
class Message:
    kind: str  # PROGRESS | RESULT | EVENT
    data: dict

    def describe(self) -> str:
        """The message in words, as run-local prints it."""
        metrics = "  ".join(f"{k} {v:.4f}" for k, v in self.data.items() if k in ("loss", "accuracy"))
        if self.kind == "PROGRESS":
            return f"epoch {self.data.get('epoch')}/{self.data.get('epochs')}  {metrics}"
        if self.kind == "EVENT":
            return f"{self.data.get('event')} at epoch {self.data.get('epoch')}"
        where = f"  model -> {self.data['model_dir']}" if self.data.get("model_dir") else ""
        return f"finished: {metrics}{where}"


def parse(line: str) -> Message | None:
    """The message on one output line, or None."""
    line = line.strip()
    if not line.startswith(PREFIX):
        return None
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
KERAS_EPOCH = re.compile(r"^Epoch (\d+)/(\d+)\s*$")
KERAS_METRIC = re.compile(r"\b([a-z_]+): (-?\d+(?:\.\d+)?(?:e[-+]?\d+)?)")
# tf_keras `12/50 [===`, Keras 3 `12/50 ━━━`, verbose=2 `50/50 -`; written to a pipe, a bar follows the previous
# update's last metric directly (`accuracy: 0.25004/4 [===`): Keras prints metrics with 4 decimals.
KERAS_BAR = re.compile(r"(?:(?<=\.\d{4})|(?<=\s)|^)\d+/\d+ (?:\[|━|-)")


def fold(line: str) -> str:
    """What a terminal would show of a line redrawn in place: the text after the last carriage
    return, backspaces applied, and of Keras progress bars written to a pipe (every update of an
    epoch on one line) only the last update."""
    line = line.rstrip("\r").rsplit("\r", 1)[-1]
    while BACKSPACE in line:  # each backspace erases the character before it
        i = line.index(BACKSPACE)
        line = line[: max(i - 1, 0)] + line[i + 1 :]
    bars = [m.start() for m in KERAS_BAR.finditer(line)]
    return line[bars[-1] :] if len(bars) > 1 else line


def keras_metrics(line: str) -> dict[str, float]:
    """Metrics of a Keras progress line (`... - loss: 0.4137 - accuracy: 0.8500`), else {}."""
    if " - " not in line or not KERAS_BAR.search(line):
        return {}
    return {k: float(v) for k, v in KERAS_METRIC.findall(fold(line)) if k not in ("eta",)}


def scan(text: str) -> list[Message]:
    """Every message in a log, in order."""
    return [m for m in map(parse, text.splitlines()) if m]


@dataclass
class TaskProgress:
    """What one task has reported so far: its latest progress, its result, its events."""

    progress: dict = field(default_factory=dict)
    result: dict = field(default_factory=dict)
    events: list[dict] = field(default_factory=list)
    speaks_protocol: bool = False
    _keras_epoch: tuple[int, int] | None = None

    def feed(self, line: str) -> Message | None:
        msg = parse(line)
        if msg is None:
            if not self.speaks_protocol:
                self._feed_keras(line)
            return None
        if not self.speaks_protocol:
            self.speaks_protocol, self.progress = True, {}
        if msg.kind == "PROGRESS":
            self.progress = msg.data
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

    @classmethod
    def of_log(cls, text: str) -> TaskProgress:
        state = cls()
        for line in text.splitlines():
            state.feed(line)
        return state

    def resumed_at(self) -> list[int]:
        """Epochs this task resumed at (BackupAndRestore after a restart), in order."""
        return [int(e["epoch"]) for e in self.events if e.get("event") == "resumed" and "epoch" in e]

    def summary(self) -> str:
        """Latest progress in a few words: `epoch 3/5, loss 0.4100, accuracy 0.8800` or `-`."""
        p = self.progress
        if not p:
            return "-"
        parts = [f"epoch {p.get('epoch')}/{p.get('epochs')}"]
        parts += [f"{k} {p[k]:.4f}" for k in ("loss", "accuracy") if k in p]
        return ", ".join(parts)

    def outcome(self) -> str:
        """The final metrics (else the latest progress), and where training resumed."""
        text = ", ".join(f"{k}={v}" for k, v in self.result.items() if k in METRICS) or self.summary()
        resumed = self.resumed_at()
        return text + (f" (resumed at epoch {resumed[-1]})" if resumed else "")
