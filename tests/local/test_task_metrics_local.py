"""Real TensorFlow: each task's metrics exporter (the chart's launcher, metrics.enabled) scraped over
its port while run-local runs the rendered release. run-local gives every task's metrics.port a
localhost port of its own (the tasks share this machine's network), as it does their TF ports."""

from __future__ import annotations

import math
import threading
import time
import urllib.request

import pytest

from rendering import render
from tf_cluster import ROOT, manifests, progress
from tf_cluster.localrun.local_runner import LocalRunner

EX = ROOT / "values-examples"
PLAIN_KERAS = ROOT / "tests" / "local" / "programs" / "plain_keras_mwms.py"
PROTOCOL = {"env": [{"name": "EPOCHS", "value": "3"}, {"name": "STEPS_PER_EPOCH", "value": "40"}]}
KERAS_BARS = {  # Keras' own bar (verbose=1: redrawn with \r and \b), no tf-cluster code in the program
    "command": ["python3", "$(CODE_DIR)/train.py"],
    "args": ["--epochs", "3", "--steps", "40"],
    "code": {"files": {"train.py": PLAIN_KERAS.read_text()}},
}


def scrape(url: str, last: dict[str, str], task: str) -> dict[tuple[str, str], float]:
    """{(series, the labels besides the task's): value}; the text kept in `last[task]`."""
    with urllib.request.urlopen(url, timeout=2) as r:
        text = last[task] = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        series, value = line.rsplit(" ", 1)
        name, labels = series.rstrip("}").split("{")
        extra = ",".join(kv for kv in labels.split(",") if kv.split("=")[0] not in ("release", "role", "index", "run"))
        out[name, extra] = float(value)
    return out


def printed_losses(log: str) -> dict[int, float]:
    """The loss the task printed at the end of each epoch (its log, read by the tooling's reader: the
    launcher's reads the same lines by the same rules, tests/launcher/test_progress_corpus.py)."""
    return progress.TaskProgress.of_log(log).history["loss"]


@pytest.mark.parametrize("program", ["protocol", "keras-bars"])
def test_a_running_tasks_metrics_show_its_epochs_and_the_loss_it_printed(program, tmp_path):
    import yaml

    from rendering import deep_merge

    values = deep_merge(
        yaml.safe_load((EX / "mwms-cpu.yaml").read_text()), PROTOCOL if program == "protocol" else KERAS_BARS
    )
    docs = render(values)
    runner = LocalRunner(docs, manifests.pods(docs, node_cpus=2), tmp_path / "run", poll_seconds=0.5, restart_delay=3)
    tasks = runner.cluster.tasks()
    urls = {t.name: t.metrics_url for t in tasks}
    assert all(urls.values()) and len(set(urls.values())) == len(tasks)  # a port of its own each
    seen: dict[str, list[dict]] = {t.name: [] for t in tasks}
    last: dict[str, str] = {}
    done = threading.Event()

    def poll():
        while not done.is_set():
            for name, url in urls.items():
                try:
                    seen[name].append(scrape(url, last, name))
                except OSError:
                    pass  # not listening yet, or already exited
            time.sleep(0.05)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    try:
        report = runner.run(300, on_update=lambda text: None)
    finally:
        done.set()
        poller.join(10)
    assert report.ok, [(j.name, j.reason) for j in runner.cluster.jobs]
    for t in tasks:
        scrapes = seen[t.name]
        assert scrapes, f"{t.name}: never scraped"
        labels_ok = ("tf_cluster_task_start_timestamp_seconds", "") in scrapes[0]
        assert labels_ok and scrapes[-1]["tf_cluster_task_epochs", ""] == 3
        epochs = [s["tf_cluster_task_epoch", ""] for s in scrapes if ("tf_cluster_task_epoch", "") in s]
        assert epochs == sorted(epochs) and len(set(epochs)) >= 2, f"{t.name}: epochs seen {sorted(set(epochs))}"
        printed = printed_losses(t.log_path.read_text())
        assert set(printed) == {1, 2, 3}, printed
        for s in scrapes:
            if ("tf_cluster_task_loss", "") in s:
                loss, epoch = s["tf_cluster_task_loss", ""], int(s["tf_cluster_task_epoch", ""])
                assert math.isclose(loss, printed[epoch], abs_tol=0), (t.name, epoch, loss, printed)
        training = [s["tf_cluster_task_state", 'state="training"'] for s in scrapes]
        assert 1 in training
        assert ("tf_cluster_task_metric", 'name="accuracy"') in scrapes[-1]
        if program == "keras-bars":
            assert (
                scrapes[-1]["tf_cluster_task_step", ""] == 3 * 40
                and scrapes[-1]["tf_cluster_task_steps_per_second", ""] > 0
            )
        # run-local's own table still reads the task's log (its output passed through the launcher)
        assert t.progress["epoch"] == 3 and t.reported.summary().startswith("epoch 3/3, loss ")
    for name, text in last.items():  # what a scraper last saw, kept beside the run
        (tmp_path / f"{name}.prom").write_text(text)
