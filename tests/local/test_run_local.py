"""Real TensorFlow: the chart's rendered cluster run as local processes (no Kubernetes)."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest

from rendering import render
from tf_cluster import ROOT, manifests
from tf_cluster.localrun.local_runner import LocalRunner

EX = ROOT / "values-examples"
FAST = {"env": [{"name": "EPOCHS", "value": "3"}, {"name": "STEPS_PER_EPOCH", "value": "15"}]}


def cluster(tmp_path: Path, values_file: Path, extra: dict | None = None, on_line=None) -> LocalRunner:
    import yaml

    from rendering import deep_merge

    values = deep_merge(yaml.safe_load(values_file.read_text()), extra or FAST)
    docs = render(values)
    return LocalRunner(
        docs,
        manifests.pods(docs, node_cpus=os.cpu_count()),
        tmp_path / "run",
        poll_seconds=0.5,
        restart_delay=3,
        on_line=on_line,
    )


def run(r: LocalRunner, timeout: float) -> bool:
    """The whole run through the runner seam; True when every Job is Complete."""
    report = r.run(timeout, on_update=lambda text: None)
    assert [j.condition for j in report.jobs] == [j.condition for j in r.cluster.jobs]
    return report.ok


def task(r: LocalRunner, name):
    return next(t for t in r.cluster.tasks() if t.name == name)


def test_mwms_chief_and_worker_train_and_the_chief_model_loads(tmp_path):
    values = {**FAST, "roles": {"chief": {"replicas": 1}, "worker": {"replicas": 1}}}
    c = cluster(tmp_path, EX / "mwms-cpu.yaml", values)
    assert run(c, 300), [(j.name, j.reason) for j in c.cluster.jobs]
    chief = task(c, "chief-0")
    assert chief.result["chief"] is True and chief.progress["epoch"] == 3
    assert chief.result["model_dir"].startswith("/mnt/")  # as the pod saw it
    model_dir = c.cluster.host_path(chief, chief.result["model_dir"])
    import numpy as np
    import tf_keras

    model = tf_keras.models.load_model(model_dir)
    assert model.predict(np.zeros((2, 16), "float32"), verbose=0).shape == (2, 4)
    assert task(c, "worker-0").result["chief"] is False


def test_parameter_server_with_evaluator_completes_and_servers_are_stopped(tmp_path):
    c = cluster(tmp_path, EX / "parameter-server-evaluator.yaml")
    assert run(c, 400), [(j.name, j.reason) for j in c.cluster.jobs]
    assert {j.role: j.condition for j in c.cluster.jobs} == {
        "chief": "Complete",
        "worker": "Complete",
        "ps": "Complete",
        "evaluator": "Complete",
    }
    for t in c.cluster.tasks():
        assert t.proc.poll() is not None, f"{t.name} still running"
        assert t.exit_codes[-1] == 0
    for name in ("worker-0", "worker-1", "ps-0"):  # join() never returns: the lifecycle stopped them
        assert "leading Job completed; task stopped" in task(c, name).log_path.read_text()
    assert task(c, "chief-0").result["model_dir"]
    assert "evaluator" not in str(task(c, "chief-0").env["TF_CONFIG"])


def test_killing_a_parameter_server_worker_mid_run_still_completes(tmp_path):
    killed = threading.Event()

    def on_line(t, line):
        if t.name == "chief-0" and t.progress and not killed.is_set():
            killed.set()
            c.kill("worker", 1, signal.SIGKILL)

    c = cluster(tmp_path, EX / "parameter-server.yaml", on_line=on_line)
    assert run(c, 400), [(j.name, j.reason) for j in c.cluster.jobs]
    assert killed.is_set()
    assert task(c, "worker-1").exit_codes[0] == 137
    assert task(c, "chief-0").exit_codes == [0]


def mwms_with_worker_1_signalled(
    tmp_path: Path, sig: int, at_epoch: int, epochs: int, steps: int, env: tuple[tuple[str, str], ...] = ()
) -> LocalRunner:
    """The MWMS example run to its end, worker 1 sent `sig` once (as a node would, as
    LocalCluster.kill does) when it reports epoch `at_epoch`. Both workers share the backup volume,
    as a pvc would in a cluster. `env`: more of the example trainer's settings."""
    signalled = threading.Event()
    settings = (("EPOCHS", str(epochs)), ("STEPS_PER_EPOCH", str(steps)), *env)
    values = {"env": [{"name": k, "value": v} for k, v in settings]}

    def on_line(t, line):
        if t.name == "worker-1" and t.progress.get("epoch") == at_epoch and not signalled.is_set():
            signalled.set()
            c.kill("worker", 1, sig)

    c = cluster(tmp_path, EX / "mwms-cpu.yaml", values, on_line=on_line)
    assert run(c, 400), [(j.name, j.reason) for j in c.cluster.jobs]
    return c


def test_killing_a_mwms_worker_restarts_it_and_training_resumes_from_backup(tmp_path):
    c = mwms_with_worker_1_signalled(tmp_path, signal.SIGKILL, at_epoch=2, epochs=4, steps=40)
    w1 = task(c, "worker-1")
    assert w1.exit_codes[0] == 137 and w1.failures >= 1
    resumed = w1.reported.resumed_at()
    assert resumed and resumed[-1] >= 2, w1.events
    assert task(c, "worker-0").result["chief"] is True


def test_a_sigterm_mid_epoch_saves_every_worker_at_that_step_and_the_run_resumes_there(tmp_path):
    """The example trainer's preemption checkpoint (TensorFlow's PreemptionCheckpointHandler): a
    worker signalled mid-run makes both finish the step in progress, save at it and exit 42, which
    job.restartExitCodes does not count; both resume at that step. test_faults.py evicts a worker on
    the real cluster and compares it with the trainer's epoch backups alone. With
    EPOCHS_AFTER_RESUME=2 (what the cut-off node scenario sets), both end together 2 epochs after
    the one they resumed in, short of EPOCHS, and the run completes."""
    env = (("EPOCHS_AFTER_RESUME", "2"),)
    c = mwms_with_worker_1_signalled(tmp_path, signal.SIGTERM, at_epoch=1, epochs=6, steps=200, env=env)
    for name in ("worker-0", "worker-1"):
        t = task(c, name)
        assert t.exit_codes == [42, 0] and t.failures == 0, (name, t.exit_codes, t.failures)
        steps = {e["event"]: e for e in t.reported.events if e.get("event") in ("stopped", "resumed")}
        assert steps["resumed"]["step"] == steps["stopped"]["step"] > 200, (name, t.reported.events)
        # the epoch it resumed in (0-based) and the last epoch it reported (1-based): R + 2 < 6
        assert t.reported.progress["epoch"] == steps["resumed"]["epoch"] + 2 < 6, (name, t.reported.events)
    assert task(c, "worker-0").result["chief"] is True


@pytest.mark.parametrize(
    "name",
    # storage-tensorboard also renders, validates and lints in every run, and Argo CD changes its TensorBoard
    ["legacy-tf1-flags", pytest.param("storage-tensorboard", marks=pytest.mark.extended)],
)
def test_the_other_cpu_examples_run_to_completion(name, tmp_path):
    extra = {**FAST, "env": FAST["env"] + [{"name": "TRAIN_STEPS", "value": "120"}]}
    c = cluster(tmp_path, EX / f"{name}.yaml", extra)
    assert run(c, 300), [(j.name, j.reason) for j in c.cluster.jobs]
    assert all(t.exit_codes[-1] == 0 for t in c.cluster.tasks())
    assert any(t.result.get("chief") for t in c.cluster.tasks())


def test_the_own_script_example_runs_its_code_files_program(tmp_path):
    """values-examples/own-script.yaml: a program in code.files, no tf-cluster code in it."""
    c = cluster(tmp_path, EX / "own-script.yaml", {})
    assert run(c, 300), [(j.name, j.reason) for j in c.cluster.jobs]
    for t in c.cluster.tasks():
        assert t.progress["epoch"] == 3 and "loss" in t.progress  # from Keras' own output
    (claim,) = (tmp_path / "run" / "volumes").iterdir()
    assert (claim / "model" / "saved_model.pb").is_file()  # worker 0 wrote MODEL_DIR on the claim


def test_gpu_example_is_refused_with_advice(tmp_path):
    from tf_cluster.errors import UsageError

    with pytest.raises(UsageError, match=r"roles.chief asks for nvidia.com/gpu.*--ignore-gpus"):
        cluster(tmp_path, EX / "mwms-gpu.yaml")


def test_a_foreign_image_is_refused_with_advice(tmp_path):
    from tf_cluster.errors import UsageError

    with pytest.raises(UsageError, match=r"image 'ghcr.io/acme/train:1'.*--allow-image ghcr.io/acme/train"):
        cluster(tmp_path, EX / "mwms-cpu.yaml", {"image": {"repository": "ghcr.io/acme/train", "tag": "1"}})


def test_a_subpath_mount_of_the_users_is_refused_with_advice(tmp_path):
    """run-local stands a folder in for a volume; a subPath of it (other than the chart's own launcher
    mounts, which take the chart's files) would mount the whole volume there: refused, naming the mount."""
    from tf_cluster.errors import UsageError

    defaults = {
        "extraVolumes": [{"name": "conf", "configMap": {"name": "train-conf"}}],
        "extraVolumeMounts": [{"name": "conf", "mountPath": "/etc/train.yaml", "subPath": "train.yaml"}],
    }
    with pytest.raises(UsageError, match=r"cannot mount conf at /etc/train.yaml with a subPath \(train.yaml\)"):
        cluster(tmp_path, EX / "mwms-cpu.yaml", {**FAST, "roleDefaults": defaults})


def test_a_crashing_trainer_fails_the_job_with_a_reason(tmp_path):
    """Exit code 2 is non-retryable by default: the Job fails at once, no retry storm."""
    values = {"command": ["python3", "-c", "import sys; sys.exit(2)"], "roles": {"worker": {"replicas": 2}}}
    c = cluster(tmp_path, EX / "mwms-cpu.yaml", values)
    assert not run(c, 60)
    (job,) = c.cluster.jobs
    assert job.condition == "Failed" and "non-retryable exit code" in job.reason
    assert sum(t.failures for t in c.cluster.tasks()) == 0


def test_a_plain_keras_program_runs_with_one_flag_and_shows_its_progress(tmp_path, capsys):
    """`--script` brings the file in (code.files), every role runs it with the given args; the
    status and summary fill from Keras' own output (no tf-cluster code in the program)."""
    from tf_cluster.cli import main

    program = ROOT / "tests" / "local" / "programs" / "plain_keras_mwms.py"
    rc = main(
        [
            "run-local",
            "--script",
            str(program),
            "--workdir",
            str(tmp_path / "run"),
            "--timeout",
            "300",
            "--",
            "--epochs",
            "2",
            "--steps",
            "10",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0, out[-3000:]
    summary = out[out.index("== tf-cluster run-local finished") :]
    rows = [ln.split() for ln in summary.splitlines() if ln.startswith("worker-")]
    assert [r[0] for r in rows] == ["worker-0", "worker-1"]
    for r in rows:
        assert r[1] == "0" and " ".join(r[4:]).startswith("epoch 2/2, loss "), summary
        assert "accuracy" in " ".join(r[4:])
    assert "code/plain_keras_mwms.py" in (tmp_path / "run" / "logs" / "worker-0.log").read_text()


# extended: both kills run in CI on the real node (tests/e2e/cluster/test_faults.py)
@pytest.mark.extended
@pytest.mark.parametrize("victim", ["ps", "chief"])
def test_a_killed_ps_or_chief_restarts_the_coordinator_which_resumes_from_its_checkpoint(tmp_path, victim):
    """A lost ps takes the coordinator's variables with it: the chief fails, its Job starts it
    again, and it restores the last checkpoint into the new ps. A killed chief does the same."""
    killed = threading.Event()
    values = {"env": [{"name": "EPOCHS", "value": "5"}, {"name": "STEPS_PER_EPOCH", "value": "30"}]}

    def on_line(t, line):
        if t.name == "chief-0" and t.progress.get("epoch") == 2 and not killed.is_set():
            killed.set()
            c.kill(victim, 0, signal.SIGKILL)

    c = cluster(tmp_path, EX / "parameter-server.yaml", values, on_line=on_line)
    assert run(c, 500), [(j.name, j.reason) for j in c.cluster.jobs]
    assert killed.is_set()
    chief = task(c, "chief-0")
    assert chief.exit_codes[-1] == 0 and chief.failures >= 1, chief.exit_codes
    if victim == "ps":
        assert task(c, "ps-0").exit_codes[0] == 137
    resumed = chief.reported.resumed_at()
    assert resumed and resumed[-1] >= 2, chief.events
    assert chief.reported.progress["epoch"] == 5
    assert (Path(c.cluster.host_path(chief, chief.result["model_dir"])) / "saved_model.pb").is_file()
