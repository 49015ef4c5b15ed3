"""The seams: Helm argv built in one module, the progress protocol parsed in one module,
and both behaving as their callers rely on."""

from __future__ import annotations

import ast
import re
import tarfile

import pytest
import yaml

from tf_cluster import CHART, ROOT, helm, progress
from tf_cluster.errors import ToolMissing

PY_FILES = sorted(p for d in ("tooling", "tests") for p in (ROOT / d).rglob("*.py") if ".venv" not in p.parts)


def offenders(pattern: str, allowed: set[str]) -> list[str]:
    rx = re.compile(pattern)
    return [
        str(p.relative_to(ROOT))
        for p in PY_FILES
        if str(p.relative_to(ROOT)) not in allowed and rx.search(p.read_text()) and p.name != "test_seams.py"
    ]


def test_helm_argv_is_built_in_one_module_only():
    assert (
        offenders(
            r"helm_binary\(|\"(helm|helm3)\",\s*\"(template|install|upgrade|uninstall|test|lint)",
            {"tooling/tf_cluster/helm.py"},
        )
        == []
    )


def test_the_progress_protocol_is_parsed_in_one_module_only():
    # test_script.py holds protocol lines as test data for progress.py itself
    assert (
        offenders(
            r"TF_CLUSTER_(PROGRESS|RESULT|EVENT)", {"tooling/tf_cluster/progress.py", "tests/tooling/test_script.py"}
        )
        == []
    )


def test_values_keep_helms_order_and_add_up():
    v = helm.Values.of(["a.yaml"], set=["x=1"], set_string=["env[0].value=7"], set_file=["code.files.t=t.py"])
    more = v.plus(helm.Values(files=("b.yaml",), set=("y=2",)))
    assert more.argv() == [
        "-f",
        "a.yaml",
        "-f",
        "b.yaml",
        "--set",
        "x=1",
        "--set",
        "y=2",
        "--set-string",
        "env[0].value=7",
        "--set-file",
        "code.files.t=t.py",
    ]


def test_a_bound_helm_names_its_binary_cluster_and_namespace():
    argv = helm.Helm("3", kubeconfig="/k", namespace="ml").argv("install", "r", CHART, "-f", "v.yaml")
    assert argv[0].endswith("helm3") and argv[1:] == [
        "install",
        "--kubeconfig",
        "/k",
        "--namespace",
        "ml",
        "r",
        str(CHART),
        "-f",
        "v.yaml",
    ]
    with pytest.raises(ToolMissing, match="use 3 or 4"):
        helm.Helm("2").argv("version")


def test_set_file_brings_a_script_into_the_release(tmp_path, helm_major):
    script = tmp_path / "train.py"
    script.write_text("print('hello from a file')\n")
    text = helm.Helm(helm_major).template("tf", helm.Values(set_file=(f"code.files.train\\.py={script}",)))
    (cm,) = [d for d in helm.parse(text) if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-code")]
    assert cm["data"] == {"train.py": "print('hello from a file')\n"}


def test_render_errors_carry_helms_message_without_its_boilerplate(helm_major):
    with pytest.raises(helm.RenderError) as e:
        helm.Helm(helm_major).template("tf", helm.Values(set=("roles.chief.replicas=2",)))
    assert str(e.value).startswith("roles.chief.replicas=2: a TensorFlow cluster has at most one chief")


def test_package_makes_the_chart_archive(tmp_path, helm_major):
    helm.Helm(helm_major).package(tmp_path)
    version = yaml.safe_load((CHART / "Chart.yaml").read_text())["version"]
    with tarfile.open(tmp_path / f"tf-cluster-{version}.tgz") as tgz:
        names = tgz.getnames()
    assert "tf-cluster/files/roles.yaml" in names and "tf-cluster/templates/validate.yaml" in names


@pytest.mark.parametrize(
    "line,kind,data",
    [
        (
            'TF_CLUSTER_PROGRESS {"epoch": 2, "epochs": 5, "loss": 0.5}',
            "PROGRESS",
            {"epoch": 2, "epochs": 5, "loss": 0.5},
        ),
        ('  TF_CLUSTER_RESULT {"model_dir": "/m"}\r', "RESULT", {"model_dir": "/m"}),
        ('TF_CLUSTER_EVENT {"event": "resumed", "epoch": 3}', "EVENT", {"event": "resumed", "epoch": 3}),
        ("TF_CLUSTER_PROGRESS epoch 2", None, None),  # not JSON: plain output
        ("TF_CLUSTER_PROGRESS [1, 2]", None, None),  # not an object
        ('TF_CLUSTER_OTHER {"a": 1}', None, None),
        ("Epoch 2/5 - loss: 0.5", None, None),
    ],
)
def test_progress_lines_are_parsed_or_left_as_output(line, kind, data):
    msg = progress.parse(line)
    assert (msg.kind, msg.data) == (kind, data) if kind else msg is None


def test_a_task_reports_its_latest_progress_its_result_and_where_it_resumed():
    log = "\n".join(
        [
            'TF_CLUSTER_PROGRESS {"epoch": 1, "epochs": 3, "loss": 0.9, "accuracy": 0.5}',
            'TF_CLUSTER_EVENT {"event": "resumed", "epoch": 1}',
            'TF_CLUSTER_PROGRESS {"epoch": 3, "epochs": 3, "loss": 0.25, "accuracy": 0.875}',
            'TF_CLUSTER_RESULT {"loss": 0.25, "accuracy": 0.875, "model_dir": "/ckpt/model"}',
        ]
    )
    t = progress.TaskProgress.of_log(log)
    assert t.summary() == "epoch 3/3, loss 0.2500, accuracy 0.8750"
    assert t.resumed_at() == [1] and t.outcome() == "loss=0.25, accuracy=0.875 (resumed at epoch 1)"
    # a run the trainer's preemption save stopped mid-epoch names the step it went on from
    at_step = progress.TaskProgress.of_log(log.replace('"epoch": 1}', '"epoch": 1, "step": 47}'))
    assert at_step.outcome() == "loss=0.25, accuracy=0.875 (resumed at epoch 1, step 47)"
    assert (
        progress.parse(log.splitlines()[-1]).describe()
        == "finished: loss 0.2500  accuracy 0.8750  model -> /ckpt/model"
    )
    assert progress.TaskProgress().summary() == "-"


def test_every_test_module_has_its_own_basename():
    """pytest (rootdir-relative, no packages) refuses two modules of one name in one session: the
    whole `make test` stops at collection (a cold CI run caught tests/{local,e2e/cluster}/test_tune.py)."""
    from collections import Counter

    names = Counter(p.name for p in (ROOT / "tests").rglob("test_*.py"))
    assert [n for n, c in names.items() if c > 1] == []


COMMANDS = ROOT / "tooling" / "tf_cluster" / "commands"


def command_imports(source: str, commands: set[str]) -> list[str]:
    """The imports in a command module's source that reach another command module (`from .render
    import x`, `from . import build`, `from ..commands.smoke import y`, `import tf_cluster.commands.z`,
    at any depth, inside functions too), as `line N: <import>`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            parts = node.module.split(".") if node.module else []
            # the module path from commands/ on: `from .x`, `from ..commands.x`, `from tf_cluster.commands.x`
            prefix = {1: [], 2: ["commands"], 0: ["tf_cluster", "commands"]}.get(node.level)
            if prefix is None or parts[: len(prefix)] != prefix:
                continue
            rest = parts[len(prefix) :]
            targets = rest[:1] if rest else [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            targets = [a.name.split(".")[2] for a in node.names if a.name.startswith("tf_cluster.commands.")]
        else:
            continue
        if any(t in commands for t in targets):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_commands_only_call_down():
    """A command imports the modules below it (tf_cluster.values, .imagebuild, .helm, ...), never
    another command: what several commands share lives a floor down."""
    commands = {p.stem for p in COMMANDS.glob("*.py") if p.name != "__init__.py"}
    assert {"render", "build", "smoke", "tune"} <= commands
    offending = {
        p.name: found
        for p in sorted(COMMANDS.glob("*.py"))
        if (found := command_imports(p.read_text(), commands - {p.stem}))
    }
    assert offending == {}, f"commands importing other commands (move what they share below commands/): {offending}"


@pytest.mark.parametrize(
    "source,found",
    [
        ("from .render import values_from\n", ["line 1: from .render import values_from"]),
        ("def f():\n    from . import build\n", ["line 2: from . import build"]),
        ("from ..commands.smoke import run\n", ["line 1: from ..commands.smoke import run"]),
        ("from ..commands import tune\n", ["line 1: from ..commands import tune"]),
        ("import tf_cluster.commands.build\n", ["line 1: import tf_cluster.commands.build"]),
        ("from tf_cluster.commands.render import x\n", ["line 1: from tf_cluster.commands.render import x"]),
        ("from . import Subparsers\nfrom ..values import values_from\nfrom .. import helm\n", []),
    ],
)
def test_the_command_import_check_names_what_it_finds(source, found):
    assert command_imports(source, {"render", "build", "smoke", "tune"}) == found


def test_the_typed_shapes_match_what_they_describe(helm_major):
    """TypedDicts name the shapes modules hand each other: TF_CONFIG as rendered (manifests.TFConfig,
    which tfjob.tfjob_tf_config returns too) and the space file as its schema allows (tune.SpaceDoc)."""
    from tf_cluster import manifests, tune

    text = helm.Helm(helm_major).template("tf", helm.Values(set=("roles.worker.replicas=2",)))
    configs = [p.tf_config for p in manifests.pods(helm.parse(text))]
    assert configs and all(c is not None for c in configs)
    for cfg in configs:
        assert set(cfg) <= set(manifests.TFConfig.__annotations__) and {"cluster", "task"} <= set(cfg)
        assert set(cfg["task"]) == set(manifests.TFTask.__annotations__)
    schema = tune.SCHEMA["properties"]
    assert set(schema) == set(tune.SpaceDoc.__annotations__)
    assert set(tune.SCHEMA["required"]) == tune.SpaceDoc.__required_keys__
    assert set(schema["parameters"]["items"]["properties"]) == set(tune.ParamDoc.__annotations__)
    assert set(schema["parameters"]["items"]["required"]) == tune.ParamDoc.__required_keys__
    assert set(schema["metric"]["properties"]) == set(tune.MetricDoc.__annotations__)
