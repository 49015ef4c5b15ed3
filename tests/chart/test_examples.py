"""Every values example renders under Helm 4 and Helm 3, validates against the
Kubernetes 1.29 and 1.35 schemas, and renders to identical bytes twice."""

from __future__ import annotations

import pytest

from rendering import EXAMPLES
from tf_cluster import CHART, helm, schemas


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_example_renders_and_validates(example, helm_major):
    docs = helm.parse(helm.template([example], helm=helm_major))
    kinds = {d["kind"] for d in docs}
    assert {"Job", "Service", "ConfigMap"} <= kinds
    problems = schemas.validate_docs(docs, ("1.29", "1.35"))
    assert problems == [], "\n".join(map(str, problems))


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_rendering_is_deterministic(example, helm_major):
    first = helm.template([example], helm=helm_major)
    second = helm.template([example], helm=helm_major)
    assert first == second


def test_helm3_and_helm4_render_the_same_objects():
    for example in EXAMPLES:
        assert helm.parse(helm.template([example], helm="4")) == helm.parse(helm.template([example], helm="3"))


def test_schema_validation_catches_a_broken_manifest():
    """The validator is not a rubber stamp: a Job with a wrong field type fails."""
    docs = helm.parse(helm.template([EXAMPLES[0]]))
    import copy

    job = next(d for d in docs if d["kind"] == "Job")
    wrong_type, unknown_field = copy.deepcopy(job), copy.deepcopy(job)
    wrong_type["spec"]["completions"] = "two"
    unknown_field["spec"]["template"]["spec"]["restartPolicyX"] = "Never"
    assert schemas.validate_docs([job], ("1.35",)) == []
    (p1,) = schemas.validate_docs([wrong_type], ("1.35",))
    (p2,) = schemas.validate_docs([unknown_field], ("1.35",))
    assert "completions" in p1.path
    assert "restartPolicyX" in p2.message


def test_kube_version_below_1_29_is_refused(helm_major):
    proc = helm.Helm(helm_major).render(kube_version="1.28.0")
    assert proc.returncode != 0 and "1.29.0-0" in proc.stderr


def test_cli_render_tf_config_table_has_one_row_per_pod(capsys):
    from tf_cluster.cli import main

    assert (
        main(
            [
                "render",
                "-f",
                str(CHART.parent.parent / "values-examples" / "parameter-server-evaluator.yaml"),
                "--tf-config",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0].split() == ["POD", "TASK", "TF_CONFIG"]
    assert [ln.split()[1] for ln in out[1:]] == ["chief:0", "worker:0", "worker:1", "ps:0", "evaluator:0"]


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_helm_lint_strict(example, helm_major):
    proc = helm.Helm(helm_major).lint(helm.Values.of([example]))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 chart(s) failed" in proc.stdout


def test_cli_set_string_and_exit_codes(capsys):
    from tf_cluster.cli import main

    assert main(["render", "--set-string", "env[0].name=EPOCHS", "--set-string", "env[0].value=7", "--tf-config"]) == 0
    assert main(["render", "--set", "roles.chief.replicas=2"]) == 4  # RenderError
    err = capsys.readouterr().err
    assert "tf-cluster render: error: roles.chief.replicas=2" in err
    assert main(["validate", "--kube-version", "1.29"]) == 0


def test_cli_smoke_refuses_what_it_cannot_use(capsys, tmp_path):
    """Usage errors come before any cluster is touched (the runs themselves: tests/e2e/cluster)."""
    from tf_cluster.cli import main

    example = str(CHART.parent.parent / "values-examples" / "mwms-cpu.yaml")
    assert main(["smoke", "-f", str(tmp_path / "nope.yaml"), "--kubeconfig", str(tmp_path / "k")]) == 2
    assert "values file" in capsys.readouterr().err
    assert main(["smoke", "-f", example, "--kubeconfig", str(tmp_path / "k")]) == 2
    assert f"kubeconfig {tmp_path / 'k'} not found" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # --kind and --kubeconfig are exclusive
        main(["smoke", "-f", example, "--kind", "x", "--kubeconfig", "k"])
