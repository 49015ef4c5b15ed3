"""Reading the child's lines: Keras' epoch lines and bars, the TF_CLUSTER_* protocol and hypertune's
reports (tooling/tf_cluster/progress.py reads them by the same rules)."""

from __future__ import annotations

import codecs
import json
import math
import os
import re
import sys
from typing import TYPE_CHECKING, Any, Callable

from .common import OUTPUT, env

if TYPE_CHECKING:
    import threading


def echo_metrics(
    stop_event: threading.Event, interval: float = 2.0, on_line: Callable[[str], None] | None = None
) -> None:
    """Print each report of the hypertune metrics file not printed yet (the library rewrites the
    file with its last 100 reports, each with a timestamp) whenever the file changes, and once
    more after the child ends. `on_line` reads each printed line (the exporter's progress)."""
    path = env("CLOUD_ML_HP_METRIC_FILE", "/tmp/hypertune/output.metrics")
    seen: tuple[float, int] | None
    seen, last = None, -1.0
    while True:
        stopping = stop_event.wait(interval)
        try:
            st = os.stat(path)
            key = (st.st_mtime, st.st_size)
        except OSError:
            key = None
        if key is not None and key != seen:
            seen = key
            try:
                with open(path) as f:
                    lines = [ln.strip() for ln in f.read().splitlines() if ln.strip()]
            except OSError:
                lines = []
            for line in lines:
                try:
                    stamp = float(json.loads(line).get("timestamp", 0))
                except (ValueError, AttributeError, TypeError):
                    continue
                if stamp > last:
                    last = stamp
                    # on a line of its own even when the program left a progress bar open
                    with OUTPUT:  # whole, between the child's chunks (metrics.enabled)
                        sys.stdout.write("\nTF_CLUSTER_METRICS %s\n" % line)
                        sys.stdout.flush()
                    if on_line is not None:
                        on_line("TF_CLUSTER_METRICS %s" % line)
            sys.stdout.flush()
        if stopping:
            return


# ------------------------------------------------------------ progress, as Prometheus metrics

# The child's output read with the rules of tooling/tf_cluster/progress.py, the one reader of the
# progress protocol (its docstring says what the lines mean); tests/progress-corpus holds both
# readers to the same readings (progress.TaskProgress.reading). Change both or neither.
PREFIX = "TF_CLUSTER_"

KINDS = ("PROGRESS", "RESULT", "EVENT", "METRICS")

BACKSPACE = "\x08"

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")

KERAS_EPOCH = re.compile(r"^Epoch (\d+)/(\d+)\s*$")

KERAS_METRIC = re.compile(r"\b([a-z_][a-z0-9_]*): (-?\d+(?:\.\d+)?(?:e[-+]?\d+)?|(?:nan|-?inf)\b)")

KERAS_BAR = re.compile(r"(?:(?<=\.\d{4})|(?<=\s)|^)(\d+)/(\d+) (?:\[|\u2501|-)")  # \u2501: Keras 3's bar

KERAS_STEP_TIME = re.compile(r"\b(\d+)(s|ms|us)/step\b")

PER_SECOND = {"s": 1.0, "ms": 1e3, "us": 1e6}

READING_COUNTS = ("epoch", "epochs", "step")

READING_RATES = ("loss", "steps_per_second", "examples_per_second")

LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"  # where str.splitlines() splits

LONGEST_LINE = 1 << 20  # a line longer is read as it is (a bound on memory, never reached by Keras)


def parse_message(line: str) -> tuple[str, dict[str, Any]] | None:
    """(kind, data) of a protocol line, else None (progress.parse)."""
    line = line.strip()
    if not line.startswith(PREFIX):
        at = line.find(PREFIX + "METRICS {")  # the echo of 3., after a progress bar left open
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
    return (kind, data) if isinstance(data, dict) else None


def fold(line: str) -> str:
    """What a terminal shows of a line redrawn in place (progress.fold)."""
    line = ANSI.sub("", line.rstrip("\r").rsplit("\r", 1)[-1])
    if BACKSPACE in line:  # each backspace erases the character before it
        kept: list[str] = []
        for ch in line:
            if ch != BACKSPACE:
                kept.append(ch)
            elif kept:
                kept.pop()
        line = "".join(kept)
    bars = [m.start() for m in KERAS_BAR.finditer(line)]
    return line[bars[-1] :] if len(bars) > 1 else line


def keras_metrics(line: str) -> dict[str, float]:
    """Metrics of a Keras progress line, else {} (progress.keras_metrics)."""
    line = ANSI.sub("", line)
    if " - " not in line or not KERAS_BAR.search(line):
        return {}
    return dict((k, float(v)) for k, v in KERAS_METRIC.findall(fold(line)) if k not in ("eta",))


def keras_pace(line: str, epoch: int) -> dict[str, float]:
    """step (over the run) and steps_per_second of a Keras progress line (progress.keras_pace)."""
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


def hypertune_numbers(data: dict[str, Any]) -> dict[str, float]:
    """The numbers of one cloudml-hypertune report (progress.hypertune_metrics)."""
    out: dict[str, float] = {}
    for k, v in data.items():
        if k in ("timestamp", "trial"):
            continue
        try:
            number = float(v)
        except (TypeError, ValueError):
            continue
        if k != "global_step":
            out[k] = number
        elif number:  # the library writes "0" for a report that gave no step
            out["step"] = number
    return out


class Progress:
    """What the child reported so far (progress.TaskProgress, the fields its reading needs)."""

    def __init__(self) -> None:
        self.progress: dict[str, Any]
        self.result: dict[str, Any]
        self.files: dict[str, float]
        self.pace: dict[str, float]
        self.progress, self.result, self.files, self.pace = {}, {}, {}, {}
        self.speaks_protocol = False
        self.keras_epoch: tuple[int, int] | None = None

    def feed(self, line: str) -> bool:
        """Read one output line; True when it shows training going on: a protocol message, Keras
        beginning an epoch or redrawing its bar (whose values are read only as the epoch's last
        redraw, by the rule of fold, but which says the task is alive: tf_cluster_task_last_progress)."""
        msg = parse_message(line)
        if msg is None:
            if not self.speaks_protocol:
                self._feed_keras(line)
            plain = ANSI.sub("", line)
            return bool(KERAS_EPOCH.match(plain.strip()) or KERAS_BAR.search(plain))
        kind, data = msg
        if kind == "METRICS":
            self.files.update(hypertune_numbers(data))
            return True
        if not self.speaks_protocol:
            self.speaks_protocol, self.progress, self.pace = True, {}, {}
        if kind == "PROGRESS":
            self.progress = data
        elif kind == "RESULT":
            self.result = data
        return True

    def _feed_keras(self, line: str) -> None:
        epoch = KERAS_EPOCH.match(line.strip())
        if epoch:
            self.keras_epoch = (int(epoch.group(1)), int(epoch.group(2)))
            return
        metrics = keras_metrics(line)
        if metrics and self.keras_epoch:
            self.progress = {"epoch": self.keras_epoch[0], "epochs": self.keras_epoch[1]}
            self.progress.update(metrics)
            self.pace = keras_pace(line, self.keras_epoch[0])

    def reading(self) -> dict[str, Any]:  # numbers, and "metrics": {name: number}
        """epoch, epochs, step, loss, steps_per_second, examples_per_second, metrics: each once
        known (progress.TaskProgress.reading)."""
        numbers: dict[str, float] = {}
        for source in (self.pace, self.files, self.progress, self.result):
            for k, v in source.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    numbers["step" if k == "global_step" else k] = float(v)
        out: dict[str, Any] = {}
        for k in READING_COUNTS:
            v = numbers.pop(k, None)
            if v is not None and math.isfinite(v):
                out[k] = int(v)
        for k in READING_RATES:
            if k in numbers:
                out[k] = numbers.pop(k)
        if numbers:
            out["metrics"] = dict(sorted(numbers.items()))
        return out


class Lines:
    """The complete lines of a byte stream read in chunks, split where str.splitlines() splits the
    whole text (as the tooling splits a log), each given to `on_line`."""

    def __init__(self, on_line: Callable[[str], None]) -> None:
        self.on_line = on_line
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.tail = ""

    def feed(self, data: bytes, final: bool = False) -> None:
        parts = (self.tail + self.decoder.decode(data, final)).splitlines(True)
        self.tail = ""
        # an unfinished line waits for the rest; so does one ending in \r (\r\n may be split)
        if parts and not final and (parts[-1][-1] not in LINE_BREAKS or parts[-1][-1] == "\r"):
            self.tail = parts.pop()
            if len(self.tail) > LONGEST_LINE:
                parts.append(self.tail)
                self.tail = ""
        for part in parts:
            if part.endswith("\r\n"):
                part = part[:-2]
            elif part[-1] in LINE_BREAKS:
                part = part[:-1]
            self.on_line(part)
