"""The example trainers' writer log (charts/tf-cluster/files/trainers/common.py, WRITERS_LOG): what the
lost-node scenarios read from the shared claim to tell whether two incarnations of one task trained at
once. Each pod writes a file of its own: two tasks appending to one file from two nodes of a
GlusterFS volume came out spliced in the soak of f7925cb (`{"step": 480{"t": ...`)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

COMMON = Path(__file__).resolve().parents[2] / "charts" / "tf-cluster" / "files" / "trainers" / "common.py"


def load_common(monkeypatch, tmp_path, pod: str, task: str):
    monkeypatch.setenv("CHECKPOINT_DIR", str(tmp_path))
    monkeypatch.setenv("WRITERS_LOG", "writers")
    monkeypatch.setenv("TF_CLUSTER_POD_NAME", pod)
    kind, index = task.split(":")
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {}, "task": {"type": kind, "index": int(index)}}))
    spec = importlib.util.spec_from_file_location(f"common_{pod}", COMMON)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


def test_each_pod_appends_to_a_file_of_its_own_once_a_second(monkeypatch, tmp_path):
    chief = load_common(monkeypatch, tmp_path, "r-chief-0-aaaaa", "chief:0").WRITERS
    worker = load_common(monkeypatch, tmp_path, "r-worker-0-bbbbb", "worker:0").WRITERS
    chief.step(10)
    chief.step(11)  # within the same second: not written
    worker.step(10)
    files = sorted((tmp_path / "writers").glob("*.jsonl"))
    assert [f.name for f in files] == ["r-chief-0-aaaaa.jsonl", "r-worker-0-bbbbb.jsonl"]
    lines = {f.stem: [json.loads(ln) for ln in f.read_text().splitlines()] for f in files}
    assert [(w["pod"], w["step"]) for w in lines["r-chief-0-aaaaa"]] == [("r-chief-0-aaaaa", 10)]
    assert [w["task"] for w in lines["r-worker-0-bbbbb"]] == ["worker:0"]  # the task from TF_CONFIG


def test_without_writers_log_nothing_is_written(monkeypatch, tmp_path):
    monkeypatch.setenv("CHECKPOINT_DIR", str(tmp_path))
    monkeypatch.delenv("WRITERS_LOG", raising=False)
    spec = importlib.util.spec_from_file_location("common_plain", COMMON)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.WRITERS.step(1)
    assert list(tmp_path.iterdir()) == []
