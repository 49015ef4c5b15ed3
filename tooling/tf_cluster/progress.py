"""The progress protocol: the one reader of the lines a training program prints so
that any runner (local processes, a cluster's pod logs) can show how far it got.

    TF_CLUSTER_PROGRESS {"epoch": 2, "epochs": 5, "loss": 0.31, "accuracy": 0.9}
    TF_CLUSTER_EVENT {"event": "resumed", "epoch": 2}
    TF_CLUSTER_RESULT {"loss": ..., "accuracy": ..., "model_dir": ..., "chief": true}

One JSON object per line after the marker. The chart's trainers print them
(images/trainers/common.py `emit`); any program may. A line that starts with a
marker but carries no JSON object is not a message (it is shown as plain output).
"""

from __future__ import annotations

import json
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


def scan(text: str) -> list[Message]:
    """Every message in a log, in order."""
    return [m for m in map(parse, text.splitlines()) if m]


@dataclass
class TaskProgress:
    """What one task has reported so far: its latest progress, its result, its events."""

    progress: dict = field(default_factory=dict)
    result: dict = field(default_factory=dict)
    events: list[dict] = field(default_factory=list)

    def feed(self, line: str) -> Message | None:
        msg = parse(line)
        if msg is None:
            return None
        if msg.kind == "PROGRESS":
            self.progress = msg.data
        elif msg.kind == "RESULT":
            self.result = msg.data
        else:
            self.events.append(msg.data)
        return msg

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
