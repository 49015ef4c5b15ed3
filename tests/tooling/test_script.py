"""Bringing a program in one flag (`--script FILE -- ARGS`) and reading the progress of programs
that only print what Keras prints."""

from __future__ import annotations

import math

import pytest

from tf_cluster import helm, manifests, progress
from tf_cluster.cli import main
from tf_cluster.values import script_values


def test_script_lands_in_code_files_and_every_role_runs_it_with_its_args(tmp_path, capsys, helm_major):
    script = tmp_path / "train.py"
    script.write_text("import sys; print('args', sys.argv[1:])\n")
    assert main(["render", "--script", str(script), "--tf-config", "--", "--lr", "0.1", "--name=a,b"]) == 0
    assert [ln.split()[1] for ln in capsys.readouterr().out.splitlines()[1:]] == ["worker:0", "worker:1"]
    docs = helm.parse(helm.Helm(helm_major).template("tf", script_values(script, ["--lr", "0.1", "--name=a,b"])))
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-code")]
    assert cm["data"] == {"train.py": script.read_text()}
    for pod in manifests.pods(docs):
        assert pod.argv[-5:] == ["python3", "/opt/tf-cluster/code/train.py", "--lr", "0.1", "--name=a,b"]
        assert pod.env["CODE_DIR"] == "/opt/tf-cluster/code"


@pytest.mark.parametrize(
    "argv,message",
    [
        (["render", "--", "--lr", "1"], "given without --script"),
        (["render", "--script", "/no/such/file.py"], "no such file"),
        (["smoke", "--kubeconfig", "k"], "give a values file (-f FILE) or a program (--script FILE)"),
        (
            ["smoke", "--script", __file__, "--requirements", __file__, "--kubeconfig", "k"],
            "build and push that image yourself (tf-cluster build --requirements FILE",
        ),
        (["run-local", "--script", __file__, "--requirements", "/no/such/req.txt"], "/no/such/req.txt: no such file"),
        (["build", "--requirements", "/no/such/req.txt", "--dry-run"], "/no/such/req.txt: no such file"),
    ],
)
def test_script_refusals_name_what_to_do(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    "line,metrics",
    [
        (
            "10/10 [==============================] - 0s 21ms/step - loss: 0.7744 - accuracy: 0.5000",
            {"loss": 0.7744, "accuracy": 0.5},
        ),
        # tf_keras writing to a pipe: every update of the epoch on one line; the last one counts
        (
            "1/4 [===>...] - ETA: 1s - loss: 1.6463 - accuracy: 0.25004/4 [=====] - 1s 4ms/step - loss: 1.4626 - "
            "accuracy: 0.2969",
            {"loss": 1.4626, "accuracy": 0.2969},
        ),
        (
            "4/4 - 0s - loss: 1.4547 - accuracy: 0.3125 - val_loss: 1.4519 - val_accuracy: 0.3125 - 192ms/epoch",
            {"loss": 1.4547, "accuracy": 0.3125, "val_loss": 1.4519, "val_accuracy": 0.3125},
        ),
        (
            "50/50 ━━━━━━━━━━━━━━━━━━━━ 1s 5ms/step - accuracy: 0.9100 - loss: 0.2500",  # Keras 3
            {"accuracy": 0.91, "loss": 0.25},
        ),
        (  # Keras 3 as a pipe gets it: colours around the count and the bar
            "\x1b[1m32/32\x1b[0m \x1b[32m━━━━━━━━━━━━━━━━━━━━\x1b[0m\x1b[37m\x1b[0m \x1b[1m0s\x1b[0m 1ms/step - "
            "accuracy: 0.4336 - loss: 0.8261",
            {"accuracy": 0.4336, "loss": 0.8261},
        ),
        (
            "8/8 [====] - 0s 2ms/step - loss: nan - f1_score: 0.5000 - val_loss: -inf - lr: 1.0000e-04",
            {"loss": math.nan, "f1_score": 0.5, "val_loss": -math.inf, "lr": 1e-4},
        ),
        ("learning rate: 0.01 - epoch done", {}),  # not a progress bar
    ],
)
def test_keras_progress_lines_give_metrics(line, metrics):
    got = progress.keras_metrics(line)
    assert got.keys() == metrics.keys()
    assert all(math.isnan(v) if math.isnan(metrics[k]) else v == metrics[k] for k, v in got.items())


def test_keras_output_fills_progress_until_the_program_speaks_the_protocol():
    t = progress.TaskProgress()
    for line in ["Epoch 2/3", "8/8 [====] - 0s 2ms/step - loss: 0.5000 - accuracy: 0.7500"]:
        t.feed(line)
    assert t.summary() == "epoch 2/3, loss 0.5000, accuracy 0.7500"
    t.feed('TF_CLUSTER_PROGRESS {"epoch": 1, "epochs": 9}')
    t.feed("Epoch 3/3")
    t.feed("8/8 [====] - 0s 2ms/step - loss: 0.1000 - accuracy: 0.9000")
    assert t.progress == {"epoch": 1, "epochs": 9}  # the protocol wins once seen


def test_redraws_fold_to_what_a_terminal_shows():
    assert progress.fold("1/9 [>....]\r5/9 [==>..]\r9/9 [=====] - loss: 0.1000") == "9/9 [=====] - loss: 0.1000"
    assert progress.fold("abc\x08\x08X") == "aX"


def test_hypertune_metrics_file_gives_the_latest_value_of_each_metric():
    """The format of cloudml-hypertune's hypertune.py: one JSON object per report, values as strings."""
    text = (
        '{"global_step": "100", "accuracy": "0.5", "timestamp": 1525851440.123456, "trial": "0"}\n'
        '{"global_step": "200", "accuracy": "0.75", "timestamp": 1525851450.1, "trial": "0"}\n'
        '{"global_step": "200", "loss": "0.3", "timestamp": 1525851450.2, "trial": "0"}\n'
        "not json\n"
    )
    assert progress.hypertune_metrics(text) == {"step": 200.0, "accuracy": 0.75, "loss": 0.3}
    state = progress.TaskProgress(files=progress.hypertune_metrics(text))
    assert state.summary() == "step 200, loss 0.3000, accuracy 0.7500" == state.outcome()
