"""Programs the project did not write (TensorFlow's tutorials, Kubeflow's TFJob examples; sources,
commits and the only changes, their data sources, in programs/third_party/SOURCES.md), brought in
with `--script` and run by run-local with real TensorFlow, each task isolated as its pod.

Those that work on Kubernetes pass; the parameter-server tutorial, which checkpoints into the
chief's /tmp where the ps tasks (which run the save ops for their variables) cannot write, fails
here as it does on a cluster, with a hint pointing at shared storage."""

from __future__ import annotations

import pytest

from tf_cluster import ROOT
from tf_cluster.cli import main
from tf_cluster.localrun.processes import sandbox_problem

PROGRAMS = ROOT / "tests" / "local" / "programs" / "third_party"
PS = ["--set", "strategy=parameterServer", "--set", "roles.chief.replicas=1"]
PS += ["--set", "roles.worker.replicas=2", "--set", "roles.ps.replicas=1"]
MWMS = ["--set", "roles.worker.replicas=2"]


def run(tmp_path, capsys, program: str, flags: list[str], args: list[str] = ()) -> tuple[int, str, str]:
    argv = ["run-local", "--script", str(PROGRAMS / program), *flags, "--no-retry", "--quiet"]
    argv += ["--workdir", str(tmp_path / "run"), "--timeout", "300"]
    rc = main([*argv, "--", *args] if args else argv)
    out, err = capsys.readouterr()
    return rc, out, err


def rows(out: str) -> dict[str, str]:
    """The summary table's RESULT column per task."""
    summary = out[out.index("== tf-cluster run-local finished") :]
    return {ln.split()[0]: " ".join(ln.split()[4:]) for ln in summary.splitlines() if ln[:3] in ("chi", "wor", "ps-")}


@pytest.mark.skipif(bool(sandbox_problem()), reason=f"no namespaces for isolated tasks here: {sandbox_problem()}")
def test_the_parameter_server_tutorial_fails_locally_as_on_kubernetes(tmp_path, capsys):
    rc, out, err = run(tmp_path, capsys, "ps_tutorial_fit.py", PS)
    assert rc == 7, out[-2000:]
    chief_log = (tmp_path / "run" / "logs" / "chief-0.log").read_text()
    assert "NotFoundError" in chief_log and "/tmp/my_working_dir/ckpt" in chief_log
    hint = next(ln for ln in err.splitlines() if ln.startswith("Hint: "))
    assert "chief-0 could not find /tmp/my_working_dir/ckpt" in hint
    assert "/tmp is private to each pod" in hint and "shared storage (storage.checkpoints.type=pvc" in hint
    assert "chief-0: /tmp/my_working_dir" in out  # what it left where only it could see it


@pytest.mark.extended  # CI keeps the PS tutorial and TensorFlow's multi-worker tutorial
def test_kubeflow_dist_mnist_parameter_server_example_passes(tmp_path, capsys):
    rc, out, err = run(tmp_path, capsys, "kubeflow_dist_mnist_ps.py", PS, ["--epochs", "1", "--batch_size", "600"])
    assert rc == 0, out[-3000:] + err[-2000:]
    assert "Evaluation accuracy" in (tmp_path / "run" / "logs" / "chief-0.log").read_text()


def test_tensorflow_multi_worker_keras_tutorial_passes_and_shows_keras_progress(tmp_path, capsys):
    rc, out, err = run(tmp_path, capsys, "mwms_keras_tutorial.py", MWMS)
    assert rc == 0, out[-3000:] + err[-2000:]
    result = rows(out)
    assert set(result) == {"worker-0", "worker-1"}
    for r in result.values():  # from Keras' own output: the program prints nothing for us
        assert r.startswith("epoch 3/3, loss ") and "accuracy" in r, result


@pytest.mark.extended
def test_kubeflow_multi_worker_keras_example_passes_with_its_tfjob_storage(tmp_path, capsys):
    """Upstream runs it as a TFJob with a claim shared by both workers at /train."""
    args = ["--saved_model_dir", "/mnt/checkpoints/saved_model/", "--checkpoint_dir", "/mnt/checkpoints/checkpoint"]
    flags = [*MWMS, "--set", "storage.checkpoints.type=pvc"]
    rc, out, err = run(tmp_path, capsys, "kubeflow_mwms_keras.py", flags, args)
    assert rc == 0, out[-3000:] + err[-2000:]
    (claim,) = (tmp_path / "run" / "volumes").iterdir()
    assert (claim / "saved_model" / "saved_model.pb").is_file()
    assert rows(out)["worker-0"].startswith("epoch 10/10, loss ")
