"""The launcher's metrics exporter (TF_CLUSTER_METRICS_PORT, the chart's metrics.enabled), run for real
around real child processes: what it serves, and that the child's output still reaches the log unchanged."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from tf_cluster import CHART, ROOT
from tf_cluster.localrun.processes import free_ports

LAUNCHER = CHART / "files" / "launcher.py"
sys.path.insert(0, str(LAUNCHER.parent))
import tf_cluster_launcher.common as launcher_common  # noqa: E402
import tf_cluster_launcher.metrics as launcher_metrics  # noqa: E402

LABELS = {"release": "rel", "role": "worker", "index": "1", "run": "abc123"}


def start(argv, tmp_path, port=None, **env):
    full = {k: v for k, v in os.environ.items() if not k.startswith(("TF_", "KUBERNETES_", "JOB_COMPLETION"))}
    full.update({"TF_CLUSTER_ROLE": "worker", "TF_TASK_INDEX": "1", "TF_CLUSTER_RELEASE": "rel"})
    full.update({"TF_CLUSTER_RUN": "abc123", "CLOUD_ML_HP_METRIC_FILE": str(tmp_path / "hypertune")})
    if port:
        full["TF_CLUSTER_METRICS_PORT"] = str(port)
    full.update(env)
    return subprocess.Popen(
        [sys.executable, str(LAUNCHER), "--", *argv],
        env=full,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
    )


def scrape(port, path="/metrics", timeout=20.0):
    """The exporter's answer: (status, content type, text), retried until it listens."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
                return r.status, r.headers["Content-Type"], r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.headers["Content-Type"], e.read().decode()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def samples(text):
    """{(name, frozenset(labels)): value} of a Prometheus text exposition (the labels minus the task's)."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        series, value = line.rsplit(" ", 1)
        name, _, labels = series.partition("{")
        pairs = dict(kv.split("=", 1) for kv in labels.rstrip("}").split(",")) if labels else {}
        pairs = {k: v.strip('"') for k, v in pairs.items()}
        assert {k: pairs.pop(k) for k in LABELS} == LABELS, line
        out[name, frozenset(pairs.items())] = float(value)
    return out


def wait_for(predicate, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


KERAS_CHILD = """
import pathlib, sys, time
go = pathlib.Path(sys.argv[1])
print("Epoch 1/3", flush=True)
sys.stdout.write(" 1/4 [=>....] - ETA: 0s - loss: 0.9000" + "\\b" * 37)
sys.stdout.write("\\r4/4 [=====] - 0s 5ms/step - loss: 0.5000 - accuracy: 0.7500\\n")
sys.stdout.flush()
print("Epoch 2/3", flush=True)
print("4/4 [=====] - 0s 4ms/step - loss: nan - accuracy: 0.8125 - f1_score: 0.5", flush=True)
while not go.exists():
    time.sleep(0.05)
"""


def test_serves_the_childs_progress_while_it_trains(tmp_path):
    (port,) = free_ports(1)
    go = tmp_path / "go"
    p = start([sys.executable, "-c", KERAS_CHILD, str(go)], tmp_path, port, TF_CLUSTER_INDEX_FAILURES="2")
    try:
        got = {}
        wait_for(lambda: got.update(s=samples(scrape(port)[2])) or ("tf_cluster_task_epoch", frozenset()) in got["s"])
        wait_for(
            lambda: got.update(s=samples(scrape(port)[2])) or got["s"][("tf_cluster_task_epoch", frozenset())] == 2
        )
        s = got["s"]
        states = {dict(k[1])["state"]: v for k, v in s.items() if k[0] == "tf_cluster_task_state"}
        assert states == {"waiting_for_peers": 0, "training": 1, "stopped_by_leader": 0, "exited": 0}
        assert s["tf_cluster_task_epochs", frozenset()] == 3
        assert s["tf_cluster_task_step", frozenset()] == 8  # 4 steps an epoch, epoch 2 done
        assert math.isnan(s["tf_cluster_task_loss", frozenset()])
        assert s["tf_cluster_task_metric", frozenset({("name", "accuracy")})] == 0.8125
        assert s["tf_cluster_task_metric", frozenset({("name", "f1_score")})] == 0.5
        assert s["tf_cluster_task_steps_per_second", frozenset()] == 250
        assert ("tf_cluster_task_examples_per_second", frozenset()) not in s  # Keras does not say
        assert s["tf_cluster_task_peer_wait_seconds", frozenset()] == 0  # no TF_CONFIG, no peers
        assert s["tf_cluster_task_index_failures", frozenset()] == 2
        now = time.time()
        assert now - 30 < s["tf_cluster_task_start_timestamp_seconds", frozenset()] <= now
        assert (
            s["tf_cluster_task_start_timestamp_seconds", frozenset()]
            <= s["tf_cluster_task_last_progress_timestamp_seconds", frozenset()]
            <= now
        )
        status, kind, _ = scrape(port)
        assert (status, kind) == (200, "text/plain; version=0.0.4; charset=utf-8")
        assert scrape(port, "/")[0] == scrape(port, "/metricsx")[0] == 404
    finally:
        go.touch()
        out, err = p.communicate(timeout=30)
    assert p.returncode == 0, err.decode()
    assert b"loss: nan" in out


@pytest.mark.skipif(not shutil.which("promtool"), reason="promtool (Debian's prometheus package) not installed")
def test_promtool_finds_the_exposition_well_formed(tmp_path):
    labels = [("release", 'a "quoted"\\ name'), ("role", "chief"), ("index", "0"), ("run", "none")]
    m = launcher_metrics.Metrics(9464, labels)
    for line in ["Epoch 1/2", "4/4 [=====] - 0s 5ms/step - loss: -inf - accuracy: 0.5 - val_loss: inf"]:
        m.read_line(line)
    m.read_line('TF_CLUSTER_METRICS {"global_step": "40", "auc": "0.75", "trial": "1", "timestamp": 1.5}')
    text = m.text()
    assert 'release="a \\"quoted\\"\\\\ name"' in text and "} -Inf\n" in text and "} +Inf\n" in text
    r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_waiting_for_peers_is_a_state_and_its_seconds_grow(tmp_path):
    (port,) = free_ports(1)
    tf_config = '{"cluster": {"worker": ["localhost:2222", "tf-worker-7.nowhere.invalid:2222"]}}'
    p = start(["true"], tmp_path, port, TF_CONFIG=tf_config, TF_CLUSTER_PEER_TIMEOUT="4", JOB_COMPLETION_INDEX="1")
    try:
        first = samples(scrape(port)[2])
        time.sleep(1.5)
        second = samples(scrape(port)[2])
    finally:
        p.communicate(timeout=30)
    assert p.returncode == launcher_common.EXIT_PEERS_TIMEOUT
    assert first["tf_cluster_task_state", frozenset({("state", "waiting_for_peers")})] == 1
    assert (
        second["tf_cluster_task_peer_wait_seconds", frozenset()]
        >= first["tf_cluster_task_peer_wait_seconds", frozenset()] + 1
    )
    assert ("tf_cluster_task_epoch", frozenset()) not in second  # nothing reported yet: no series


def test_the_childs_output_passes_through_unchanged_and_as_it_comes(tmp_path):
    """Chunks, not lines: a bar redrawn with \\r and \\b, half a line, bytes that are not UTF-8, stderr."""
    (port,) = free_ports(1)
    go = tmp_path / "go"
    child = (
        "import os, pathlib, sys, time\n"
        "os.write(1, b'Epoch 1/2\\n 1/9 [>...] - loss: 0.5' + b'\\x08' * 20 + b'\\r 5/9 [==>.] half')\n"
        "os.write(2, b'warning: \\xff\\xfe not utf-8\\r\\n')\n"
        f"while not pathlib.Path({str(go)!r}).exists(): time.sleep(0.05)\n"
        "os.write(1, b' a line\\n\\xe2\\x94\\x81 tail without newline')\n"
    )
    p = start([sys.executable, "-c", child], tmp_path, port)
    try:
        first = b""
        while not first.endswith(b" half"):  # before the child wrote the rest of its line
            first += os.read(p.stdout.fileno(), 4096)
    finally:
        go.touch()
    out, err = p.communicate(timeout=30)
    assert (
        first + out
        == b"Epoch 1/2\n 1/9 [>...] - loss: 0.5"
        + b"\x08" * 20
        + b"\r 5/9 [==>.] half a line\n\xe2\x94\x81 tail without newline"
    )
    assert b"warning: \xff\xfe not utf-8\r\n" in err
    assert p.returncode == 0


@pytest.mark.parametrize("metrics", [False, True])
def test_the_child_writes_to_the_launchers_own_stdout_unless_metrics_are_on(metrics, tmp_path):
    child = "import os; print(os.readlink('/proc/self/fd/1'), os.readlink('/proc/self/fd/2'))"
    p = start([sys.executable, "-c", child], tmp_path, free_ports(1)[0] if metrics else None)
    ours = {f"pipe:[{os.fstat(f.fileno()).st_ino}]" for f in (p.stdout, p.stderr)}
    out, err = p.communicate(timeout=30)
    assert (set(out.decode().split()) == ours) is not metrics
    assert (b"serving metrics" in err) is metrics


def test_a_port_in_use_is_said_and_training_goes_on(tmp_path):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        p = start([sys.executable, "-c", "print('trained'); raise SystemExit(3)"], tmp_path, port)
        out, err = p.communicate(timeout=30)
    assert p.returncode == 3 and out == b"trained\n"
    assert f"cannot serve metrics on port {port}".encode() in err


def test_hypertune_reports_echoed_by_the_launcher_are_read_too(tmp_path):
    (port,) = free_ports(1)
    go = tmp_path / "go"
    child = (
        "import json, pathlib, time\n"
        f"pathlib.Path({str(tmp_path / 'hypertune')!r}).write_text(json.dumps("
        "{'accuracy': '0.875', 'global_step': '300', 'timestamp': time.time(), 'trial': '0'}) + '\\n')\n"
        f"while not pathlib.Path({str(go)!r}).exists(): time.sleep(0.05)\n"
    )
    p = start([sys.executable, "-c", child], tmp_path, port)
    try:
        got = {}
        wait_for(lambda: got.update(s=samples(scrape(port)[2])) or ("tf_cluster_task_step", frozenset()) in got["s"])
    finally:
        go.touch()
        p.communicate(timeout=30)
    assert got["s"]["tf_cluster_task_step", frozenset()] == 300
    assert got["s"]["tf_cluster_task_metric", frozenset({("name", "accuracy")})] == 0.875


def test_states_and_labels_from_the_environment(monkeypatch):
    for k, v in {"TF_CLUSTER_METRICS_PORT": "9464", "TF_CLUSTER_RELEASE": "r", "TF_CLUSTER_ROLE": "ps"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("TF_TASK_INDEX", "4")
    monkeypatch.setenv("JOB_COMPLETION_INDEX", "5")  # the Job controller's own, when Kubernetes set it
    monkeypatch.setenv("TF_CLUSTER_INDEX_FAILURES", "")  # the annotation is absent before a first failure
    monkeypatch.delenv("TF_CLUSTER_RUN", raising=False)
    m = launcher_metrics.Metrics.from_env()
    assert (m.port, m.labels, m.failures) == (9464, [("release", "r"), ("role", "ps"), ("index", "5"), ("run", "")], 0)
    m.set_state("stopped_by_leader")
    m.set_state("exited", unless=("stopped_by_leader",))
    assert 'state="stopped_by_leader"} 1' in m.text()
    monkeypatch.setenv("TF_CLUSTER_METRICS_PORT", "metrics")
    assert launcher_metrics.Metrics.from_env() is None
    monkeypatch.delenv("TF_CLUSTER_METRICS_PORT")
    assert launcher_metrics.Metrics.from_env() is None


def test_a_bar_redrawn_mid_epoch_says_the_task_is_alive_though_only_the_epochs_last_state_is_read():
    m = launcher_metrics.Metrics(9464, list(LABELS.items()))
    assert m.last_progress is None
    m.read_line("Epoch 1/3")
    begun = m.last_progress
    time.sleep(0.01)
    m.read_line(" 5/40 [==>.......] - ETA: 3s - loss: 0.5000" + "\x08" * 44)  # tf_keras' redraw, erased by the next
    assert m.last_progress > begun and m.progress.reading() == {}
    alive = m.last_progress
    m.read_line("2026-11-24 10:00:02.000001: W tensorflow/core/framework/local_rendezvous.cc:404] aborting")
    assert m.last_progress == alive
    assert "tf_cluster_task_last_progress_timestamp_seconds" in m.text() and "tf_cluster_task_loss" not in m.text()


def test_the_series_served_are_those_the_alerts_and_dashboard_read():
    """tests/promql.py's EXPORTED is what tests/monitoring checks the PrometheusRule and the dashboard
    against: it must be what the launcher serves once every value is known."""
    import promql

    m = launcher_metrics.Metrics(9464, list(LABELS.items()))
    m.waiting(time.monotonic())
    # a custom loop's protocol lines, with every number a line can carry (the corpus's case)
    for line in (ROOT / "tests" / "progress-corpus" / "protocol-step-and-throughput.txt").open():
        m.read_line(line.rstrip("\n"))
    served = {line.split()[2] for line in m.text().splitlines() if line.startswith("# TYPE ")}
    assert served == promql.EXPORTED
    assert all(f"# TYPE {name} gauge" in m.text() for name in served)
