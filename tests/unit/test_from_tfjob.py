"""`tf-cluster from-tfjob` over Kubeflow's own TFJob manifests (tests/tfjob/upstream, sources in
its SOURCES.md): the values it writes, the notes it prints for what changes, and every task's
TF_CONFIG compared with the TFJob controller's (transcribed from its source and checked here
against the controller's own unit-test strings). Bad manifests (tests/tfjob/bad) are refused
with the field named."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from rendering import render
from tf_cluster import ROOT, tfjob
from tf_cluster.cli import main

UPSTREAM = ROOT / "tests" / "tfjob" / "upstream"
BAD = ROOT / "tests" / "tfjob" / "bad"
ENTRY = ["python", "/var/tf_dist_mnist/dist_mnist.py"]


def convert(name: str, **kw) -> tfjob.Conversion:
    (job,) = tfjob.load((UPSTREAM / name).read_text(), name)
    return tfjob.convert(job, **kw)


def notes(conv: tfjob.Conversion) -> str:
    return "\n".join(map(str, conv.notes))


# What each upstream manifest must become (a subset of the values: the fields it sets) and notes it must print.
CASES = {
    "dist-mnist-ps.yaml": (  # ParameterServer with a chief
        {
            "strategy": "parameterServer",
            "roles": {"chief": {"replicas": 1}, "worker": {"replicas": 2}, "ps": {"replicas": 1}},
            "image": {"repository": "kubeflow/tf-dist-mnist-test", "tag": "latest"},
            "command": ENTRY,
            "jobPolicies": {r: {"backoffLimitPerIndex": 0} for r in ("chief", "worker", "ps")},
        },
        ["Chief.restartPolicy: Never -> jobPolicies.chief.backoffLimitPerIndex 0", "securityContext: not set"],
    ),
    "dist-mnist-ps-evaluator.yaml": (  # with an evaluator
        {"roles": {"evaluator": {"replicas": 1}}, "strategy": "parameterServer"},
        ["Evaluator: the evaluator is not listed in TF_CONFIG's cluster"],
    ),
    "multi-worker-gpu-volume.yaml": (  # MultiWorkerMirrored, GPUs, a claim
        {
            "strategy": "multiWorkerMirrored",
            "roles": {"worker": {"replicas": 2}, "chief": {"replicas": 0}},
            "roleDefaults": {"gpus": {"nvidia.com/gpu": 1}},
            "storage": {
                "checkpoints": {"type": "existingClaim", "existingClaim": "strategy-volume", "mountPath": "/train"}
            },
        },
        ["volumes[training]: -> storage.checkpoints at /train", "successPolicy: default: the run completes when every"],
    ),
    "mnist-with-summaries.yaml": (  # a single task: no TF_CONFIG either way; a claim
        {
            "roles": {"worker": {"replicas": 1}},
            "command": ["python", "/var/tf_mnist/mnist_with_summaries.py", "--log_dir=/train/logs"]
            + ["--learning_rate=0.01", "--batch_size=150"],
            "storage": {
                "checkpoints": {"type": "existingClaim", "existingClaim": "tfevent-volume", "mountPath": "/train"}
            },
        },
        ["cleanPodPolicy: None: tf-cluster deletes no pods"],
    ),
    "simple.yaml": (  # OnFailure: retried per task
        {"roles": {"worker": {"replicas": 2}}, "command": ["python", "/var/tf_mnist/mnist_with_summaries.py"]},
        ["Worker.restartPolicy: OnFailure -> retried up to job.backoffLimitPerIndex times per task"],
    ),
    "sdk-e2e-gang-scheduling.yaml": (  # runPolicy.schedulingPolicy with Volcano's scheduler
        {
            "scheduling": {"podGroup": "volcano"},
            "roleDefaults": {
                "resources": {"limits": {"memory": "4Gi", "cpu": "1.6"}},
                "podAnnotations": {"sidecar.istio.io/inject": "false"},
            },
        },
        ["spec.runPolicy.schedulingPolicy: -> scheduling: {'podGroup': 'volcano'}"],
    ),
}


def contains(values: dict, want: dict, path: str = "") -> None:
    for key, value in want.items():
        assert key in values, f"{path}{key} missing from {values}"
        if isinstance(value, dict):
            contains(values[key], value, f"{path}{key}.")
        else:
            assert values[key] == value, f"{path}{key}: {values[key]!r} != {value!r}"


@pytest.mark.parametrize("name", CASES)
def test_upstream_manifests_convert_with_notes_and_the_same_tf_config(name, helm_major):
    want, want_notes = CASES[name]
    conv = convert(name, entrypoint=ENTRY)
    contains(conv.values, want)
    for text in want_notes:
        assert text in notes(conv), notes(conv)
    # rendered: every task's TF_CONFIG is the TFJob controller's, apart from the documented differences
    docs = render(conv.values, helm_major=helm_major, release=conv.name, namespace=conv.namespace or "default")
    assert tfjob.compare(conv.tfjob, docs, conv.namespace or "default") == []
    jobs = {d["metadata"]["name"] for d in docs if d["kind"] == "Job"}
    assert len(jobs) == sum(1 for r in conv.values["roles"].values() if r["replicas"]), jobs


def test_the_comparison_finds_a_changed_cluster():
    """compare is not vacuous: one worker fewer in the values is reported task by task."""
    conv = convert("dist-mnist-ps.yaml", entrypoint=ENTRY)
    conv.values["roles"]["worker"]["replicas"] = 1
    problems = tfjob.compare(conv.tfjob, render(conv.values, release=conv.name), "default")
    assert any("cluster" in p for p in problems) and any("tasks" in p for p in problems), problems


def test_the_tfjob_tf_config_transcription_matches_the_controllers_own_test():
    """pkg/controller.v1/tensorflow/pod_test.go 'should generate desired cluster spec' (no custom domain):
    NewTFJobWithEvaluatorAndNamespace(1, 1, 1, "ns3"), task worker 0; and NewTFJob(1, 0): none."""
    c = {"containers": [{"name": "tensorflow", "image": "x"}]}
    job = {
        "metadata": {"name": "test-tfjob", "namespace": "ns3"},
        "spec": {
            "tfReplicaSpecs": {t: {"replicas": 1, "template": {"spec": c}} for t in ("Worker", "PS", "Evaluator")}
        },
    }
    expected = (
        '{"cluster":{"evaluator":["test-tfjob-evaluator-0.ns3.svc:2222"],"ps":["test-tfjob-ps-0.ns3.svc:2222"],'
        '"worker":["test-tfjob-worker-0.ns3.svc:2222"]},"task":{"type":"worker","index":0},"environment":"cloud"}'
    )
    got = tfjob.tfjob_tf_config(job, "Worker", 0)
    assert json.dumps({**got, "cluster": dict(sorted(got["cluster"].items()))}, separators=(",", ":")) == expected
    alone = {
        "metadata": {"name": "t"},
        "spec": {"tfReplicaSpecs": {"Worker": {"replicas": 1, "template": {"spec": c}}}},
    }
    assert tfjob.tfjob_tf_config(alone, "Worker", 0) is None


def test_a_single_worker_with_an_evaluator_keeps_tf_config_as_under_tfjob():
    text = (UPSTREAM / "mnist-with-summaries.yaml").read_text()
    job = yaml.safe_load(text)
    job["spec"]["tfReplicaSpecs"]["Evaluator"] = json.loads(json.dumps(job["spec"]["tfReplicaSpecs"]["Worker"]))
    conv = tfjob.convert(job)
    assert conv.values["tfConfig"] == {"alwaysSet": True}
    assert tfjob.compare(conv.tfjob, render(conv.values, release=conv.name), "default") == []


def test_master_becomes_the_chief_and_exit_code_maps_to_non_retryable_codes():
    job = yaml.safe_load((UPSTREAM / "dist-mnist-ps.yaml").read_text())
    specs = job["spec"]["tfReplicaSpecs"]
    specs["Master"] = specs.pop("Chief")
    specs["Worker"]["restartPolicy"] = "ExitCode"
    conv = tfjob.convert(job, entrypoint=ENTRY)
    assert conv.values["roles"]["chief"] == {"replicas": 1}
    assert conv.values["jobPolicies"]["worker"] == {"nonRetryableExitCodes": list(range(1, 128))}
    assert "Master becomes the chief role" in notes(conv)
    assert tfjob.compare(conv.tfjob, render(conv.values, release=conv.name), "default") == []


def test_fields_without_an_equivalent_are_each_named():
    job = yaml.safe_load((UPSTREAM / "simple.yaml").read_text())
    pod = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]
    pod["hostNetwork"] = True
    pod["initContainers"] = [{"name": "fetch", "image": "busybox"}]
    pod["containers"].append({"name": "sidecar", "image": "envoy"})
    pod["containers"][0]["workingDir"] = "/work"
    pod["volumes"] = [{"name": "cfg", "configMap": {"name": "c"}}]
    pod["containers"][0]["volumeMounts"] = [{"name": "cfg", "mountPath": "/etc/cfg"}]
    job["spec"]["runPolicy"] = {"cleanPodPolicy": "All", "suspend": True, "ttlSecondsAfterFinished": 60}
    job["spec"]["enableDynamicWorker"] = True
    text = notes(tfjob.convert(job))
    for field in (
        "template.spec.hostNetwork: no equivalent",
        "template.spec.initContainers: no equivalent",
        "containers[sidecar]: a second container (sidecar) has no equivalent",
        "containers[tensorflow].workingDir: no equivalent",
        "volumes[cfg]: a configMap volume has no equivalent",
        "cleanPodPolicy: All: no equivalent",
        "spec.runPolicy.suspend: no equivalent",
        "ttlSecondsAfterFinished: -> job.ttlSecondsAfterFinished",
        "spec.enableDynamicWorker: no equivalent",
    ):
        assert field in text, text


def bad_cases():
    return sorted(BAD.glob("*.yaml"))


@pytest.mark.parametrize("path", bad_cases(), ids=lambda p: p.stem)
def test_bad_manifests_are_refused_naming_the_field(path, capsys):
    expect = path.read_text().splitlines()[0].removeprefix("# expect: ")
    assert main(["from-tfjob", str(path)]) == 5
    err = capsys.readouterr().err
    assert expect in err, err


def test_bad_corpus_covers_the_issue_cases():
    assert {p.stem for p in bad_cases()} >= {"not-a-tfjob", "unknown-replica-type", "chief-and-master", "unreadable"}


def test_cli_reads_kubectl_list_output_and_writes_one_file_per_tfjob(tmp_path):
    items = [yaml.safe_load((UPSTREAM / n).read_text()) for n in ("simple.yaml", "multi-worker-gpu-volume.yaml")]
    listing = tmp_path / "tfjobs.yaml"
    listing.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    cli = [sys.executable, "-m", "tf_cluster.cli", "from-tfjob", str(listing)]
    refused = subprocess.run(cli, capture_output=True, text=True)
    assert refused.returncode == 2 and "give -o FOLDER" in refused.stderr
    r = subprocess.run(
        [*cli, "-o", str(tmp_path / "out"), "--entrypoint", "python /multi_worker.py"], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert written == ["multi-worker.yaml", "tfjob-simple.yaml"]
    assert r.stderr.count("TF_CONFIG: 2 task(s) match the TFJob controller's") == 2
    values = yaml.safe_load((tmp_path / "out" / "multi-worker.yaml").read_text())
    assert values["command"] == ["python", "/multi_worker.py"]  # it had none: the entrypoint given
    text = (tmp_path / "out" / "tfjob-simple.yaml").read_text()
    assert "# Converter notes" in text and "OnFailure -> retried" in text  # notes kept in the file too


def test_without_an_entrypoint_the_values_say_so_and_helm_refuses_them(tmp_path, capsys):
    out = tmp_path / "v.yaml"
    assert main(["from-tfjob", str(UPSTREAM / "dist-mnist-ps.yaml"), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "TFJob ran the image's ENTRYPOINT" in err and "--entrypoint" in err
    assert yaml.safe_load(out.read_text())["command"] == []
    r = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "tf-cluster"), "render", "-f", str(out)], capture_output=True, text=True
    )
    assert r.returncode == 4 and "command" in r.stderr, r.stderr


def test_digests_tmp_shm_security_contexts_and_empty_replica_types_render_as_under_tfjob():
    job = yaml.safe_load((UPSTREAM / "simple.yaml").read_text())
    digest = "sha256:" + "ab" * 32
    pod = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]
    pod["containers"][0]["image"] = f"registry.example/tf:2.17@{digest}"
    pod["containers"][0]["volumeMounts"] = [{"name": "t", "mountPath": "/tmp"}, {"name": "s", "mountPath": "/dev/shm"}]
    pod["volumes"] = [
        {"name": "t", "emptyDir": {"sizeLimit": "5Gi"}},
        {"name": "s", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}},
    ]
    pod["securityContext"] = {"runAsUser": 0}
    ps = {"name": "tensorflow", "image": pod["containers"][0]["image"]}
    job["spec"]["tfReplicaSpecs"]["PS"] = {"replicas": 0, "template": {"spec": {"containers": [ps]}}}
    conv = tfjob.convert(job)
    assert conv.values["image"] == {"repository": "registry.example/tf", "digest": digest}
    assert conv.values["storage"] == {"tmp": {"sizeLimit": "5Gi"}} and conv.values["shmSize"] == "2Gi"
    docs = render(conv.values, release=conv.name)
    (job_doc,) = [d for d in docs if d["kind"] == "Job"]
    spec = job_doc["spec"]["template"]["spec"]
    assert spec["containers"][0]["image"] == f"registry.example/tf@{digest}"
    assert spec["securityContext"] == {"runAsUser": 0}, "the chart's runAsNonRoot would refuse uid 0"
    mounts = [m["mountPath"] for m in spec["containers"][0]["volumeMounts"]]
    assert mounts.count("/tmp") == 1 and mounts.count("/dev/shm") == 1
    assert tfjob.compare(conv.tfjob, docs, "default") == []  # PS with replicas 0: no address either way


def test_a_scheduling_policy_without_volcano_gangs_where_the_cluster_can():
    job = yaml.safe_load((UPSTREAM / "simple.yaml").read_text())
    job["spec"]["runPolicy"] = {"schedulingPolicy": {"minAvailable": 2, "priorityClass": "training"}}
    conv = tfjob.convert(job)
    assert conv.values["scheduling"] == {"gang": "auto"}
    assert conv.values["roleDefaults"]["priorityClassName"] == "training"
    assert "use --gang volcano or coscheduling" in notes(conv)
