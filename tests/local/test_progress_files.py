"""Progress for a program that prints nothing a runner can read: the status table and summary
fill from the files it writes, TensorBoard event files in its LOG_DIR and the metrics file of
Vertex AI's cloudml-hypertune library (the real library, installed with --requirements)."""

from __future__ import annotations

import pytest

from tf_cluster import requirements
from tf_cluster.cli import main
from tf_cluster.localrun.processes import sandbox_problem

PROGRAM = """
import os
import hypertune
import tensorflow as tf

writer = tf.summary.create_file_writer(os.path.join(os.environ["LOG_DIR"], "train"))
hpt = hypertune.HyperTune()
for step in range(1, 31):
    loss = 1.0 / step
    with writer.as_default():
        tf.summary.scalar("loss", loss, step=step)
        tf.summary.scalar("accuracy", 1.0 - loss, step=step)
    if step % 10 == 0:
        hpt.report_hyperparameter_tuning_metric(
            hyperparameter_metric_tag="val_accuracy", metric_value=1.0 - loss / 2, global_step=step)
writer.flush()
"""


@pytest.mark.skipif(bool(sandbox_problem()), reason=f"no namespaces for isolated tasks here: {sandbox_problem()}")
def test_a_silent_program_is_read_from_its_event_files_and_its_hypertune_metrics(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(requirements, "CACHE", tmp_path / "cache")
    (tmp_path / "prog.py").write_text(PROGRAM)
    (tmp_path / "requirements.txt").write_text("cloudml-hypertune==0.1.0.dev6\n")
    argv = ["run-local", "--script", str(tmp_path / "prog.py"), "--requirements", str(tmp_path / "requirements.txt")]
    argv += ["--set", "roles.worker.replicas=1", "--workdir", str(tmp_path / "run"), "--timeout", "120"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    summary = out[out.index("== tf-cluster run-local finished") :]
    row = next(ln for ln in summary.splitlines() if ln.startswith("worker-0"))
    assert row.split(None, 4)[4] == "step 30, loss 0.0333, accuracy 0.9667", summary
    hypertune_file = tmp_path / "run" / "pods" / "worker-0" / "tmp" / "hypertune" / "output.metrics"
    assert hypertune_file.is_file()  # in the pod's own /tmp, where the library writes by default
