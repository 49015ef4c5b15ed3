"""One protocol, one corpus, two readers: every sample output under tests/progress-corpus is read by
the tooling (tf_cluster.progress, the reference) and by the chart's launcher (the parser of its
metrics exporter, fed the bytes in chunks as it reads its child's pipe); both give the case's .json."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from tf_cluster import CHART, ROOT, progress

sys.path.insert(0, str(CHART / "files"))
import tf_cluster_launcher.progress as launcher_progress  # noqa: E402

CORPUS = ROOT / "tests" / "progress-corpus"
CASES = sorted(CORPUS.glob("*.txt"))


def comparable(value):
    """A reading as its .json writes it: NaN and infinities as Prometheus spells them."""
    if isinstance(value, dict):
        return {k: comparable(v) for k, v in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")
    return value


def expected(case: Path) -> dict:
    return json.loads(case.with_suffix(".json").read_text())


def text_of(case: Path) -> str:
    return case.read_bytes().decode("utf-8")


def launcher_reading(data: bytes, chunk: int) -> dict:
    state = launcher_progress.Progress()
    lines = launcher_progress.Lines(state.feed)
    for i in range(0, len(data), chunk):
        lines.feed(data[i : i + chunk])
    lines.feed(b"", final=True)
    return comparable(state.reading())


def test_every_case_has_its_reading_and_the_corpus_covers_the_kinds_of_output():
    assert {p.stem for p in CASES} == {p.stem for p in CORPUS.glob("*.json")}
    readings = [expected(p) for p in CASES]
    assert any(r.get("loss") == "NaN" for r in readings) and any(r.get("loss") == "+Inf" for r in readings)
    assert all(any(k in r for r in readings) for k in ("step", "steps_per_second", "examples_per_second", "metrics"))
    assert any("\x1b[" in text_of(p) for p in CASES) and any("\x08" in text_of(p) for p in CASES)
    assert any("\r\n" in text_of(p) for p in CASES) and any("TF_CLUSTER_METRICS" in text_of(p) for p in CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.stem)
def test_the_tooling_reads_the_cases_reading(case):
    assert comparable(progress.TaskProgress.of_log(text_of(case)).reading()) == expected(case)


@pytest.mark.parametrize("chunk", [1, 7, 4096, 1 << 20])
@pytest.mark.parametrize("case", CASES, ids=lambda p: p.stem)
def test_the_launcher_reads_the_same_from_its_childs_output_in_chunks_of_any_size(case, chunk):
    assert launcher_reading(case.read_bytes(), chunk) == expected(case)


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.stem)
def test_both_readers_agree_after_every_line(case):
    tooling, seen = progress.TaskProgress(), []
    state = launcher_progress.Progress()

    def both(line):
        state.feed(line)
        tooling.feed(line)
        seen.append((line, comparable(state.reading()), comparable(tooling.reading())))

    lines = launcher_progress.Lines(both)
    lines.feed(case.read_bytes(), final=True)
    assert [line for line, _, _ in seen] == text_of(case).splitlines()  # the lines a whole log splits into
    for line, by_launcher, by_tooling in seen:
        assert by_launcher == by_tooling, line


def test_the_launchers_rules_are_the_toolings():
    for name in ("ANSI", "KERAS_EPOCH", "KERAS_METRIC", "KERAS_STEP_TIME"):
        assert getattr(launcher_progress, name).pattern == getattr(progress, name).pattern, name
    assert launcher_progress.KERAS_BAR.pattern.replace("\\u2501", "━") == progress.KERAS_BAR.pattern
    assert (launcher_progress.PREFIX, launcher_progress.KINDS, launcher_progress.PER_SECOND) == (
        progress.PREFIX,
        progress.KINDS,
        progress.PER_SECOND,
    )
    readings = (launcher_progress.READING_COUNTS, launcher_progress.READING_RATES)
    assert readings == (progress.READING_COUNTS, progress.READING_RATES)
