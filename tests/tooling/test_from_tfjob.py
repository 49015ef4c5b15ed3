"""`tf-cluster from-tfjob` over Kubeflow's own TFJob manifests (tests/tfjob/upstream, sources in
its SOURCES.md): the values it writes, the notes it prints for what changes, and every task's
TF_CONFIG compared with the TFJob controller's (transcribed from its source and checked here
against the controller's own unit-test strings). Bad manifests (tests/tfjob/bad) are refused
with the field named. A container with no command gets its image's ENTRYPOINT/CMD from the local
podman store or the image's registry (a real podman store and CNCF distribution registry here),
and an image found nowhere writes nothing and names --entrypoint."""

from __future__ import annotations

import base64
import contextlib
import fcntl
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from needs import absent

from rendering import render
from tf_cluster import ROOT, imageconfig, manifests, tfjob
from tf_cluster.cli import main
from tf_cluster.commands import from_tfjob
from tf_cluster.errors import RenderError

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
    assert conv.values["jobPolicies"]["worker"] == {
        "nonRetryableExitCodes": list(range(1, 128)),
        "restartExitCodes": [],
    }
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
        "containers[tensorflow].workingDir: no equivalent",
        "cleanPodPolicy: All: no equivalent",
        "spec.runPolicy.suspend: no equivalent",
        "ttlSecondsAfterFinished: -> job.ttlSecondsAfterFinished",
        "spec.enableDynamicWorker: no equivalent",
    ):
        assert field in text, text


def bad_cases():
    return sorted(BAD.glob("*.yaml"))


@pytest.mark.parametrize("path", bad_cases(), ids=lambda p: p.stem)
def test_bad_manifests_are_refused_naming_the_field(path, capsys, tmp_path):
    """Exit 5 (a manifest tf-cluster cannot convert), or the `# exit:` line's code: 4 when the
    converted values are refused by the chart (an injected field: a newline in a name)."""
    lines = path.read_text().splitlines()
    expect = lines[0].removeprefix("# expect: ")
    code = int(next((ln.split(":")[1] for ln in lines if ln.startswith("# exit:")), 5))
    assert main(["from-tfjob", str(path), "-o", str(tmp_path)]) == code
    err = capsys.readouterr().err
    assert expect in err, err
    assert not list(tmp_path.iterdir()), "nothing written for a refused manifest"


def test_bad_corpus_covers_the_issue_cases():
    assert {p.stem for p in bad_cases()} >= {
        "not-a-tfjob",
        "unknown-replica-type",
        "chief-and-master",
        "unreadable",
        "priority-class-injection",
        "namespace-path",
    }


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


def test_one_tfjob_into_a_folder_not_made_yet_is_written_there_by_name(tmp_path):
    """docs/user-guide/from-tfjob.md: `-o converted/` writes one <name>.yaml each, also for one TFJob;
    a PATH without the slash is the values file itself."""
    cli = [sys.executable, "-m", "tf_cluster.cli", "from-tfjob", str(UPSTREAM / "simple.yaml")]
    for given, written in (("converted/", "converted/tfjob-simple.yaml"), ("one.yaml", "one.yaml")):
        r = subprocess.run(
            [*cli, "-o", str(tmp_path) + "/" + given, "--entrypoint", "python /t.py"], capture_output=True, text=True
        )
        assert r.returncode == 0, r.stderr
        assert (tmp_path / written).is_file() and f"wrote {tmp_path / written}" in r.stderr, r.stderr


def test_without_an_entrypoint_the_values_say_so_and_the_schema_check_refuses_them():
    """convert() with no command to give (a library caller that looked nothing up) leaves it empty with
    a note; the check from-tfjob runs before writing renders the values as written, so it refuses them
    as `helm install` would (`at '/command': minItems`)."""
    conv = convert("dist-mnist-ps.yaml")
    assert conv.values["command"] == []
    assert "TFJob ran the image's ENTRYPOINT" in notes(conv) and "--entrypoint" in notes(conv)
    with pytest.raises(RenderError, match="command"):
        from_tfjob.check(conv, "4")


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


# ------------------------------------------------------------ the image's ENTRYPOINT, looked up
# A container with no command ran its image's ENTRYPOINT under TFJob: from-tfjob reads it from the local
# podman store, else from the registry. The TFJob is Kubeflow's dist-mnist example, verbatim:
# https://github.com/kubeflow/training-operator/blob/6f74c7f6b2ed6c27aabd82d0a316b23f0646059c/examples/tensorflow/dist-mnist/tf_job_mnist.yaml
# (tag v1.9.0; tests/tfjob/upstream/dist-mnist-ps.yaml). Its image's Dockerfile, at the same commit,
# ends `ENTRYPOINT ["python", "/var/tf_dist_mnist/dist_mnist.py"]`: the test image has that ENTRYPOINT
# and the name, built FROM scratch here (nothing pulled; a build with no RUN needs no runtime).
DIST_MNIST = UPSTREAM / "dist-mnist-ps.yaml"
IMAGE = "kubeflow/tf-dist-mnist-test:latest"
STORED = f"docker.io/{IMAGE}"  # as podman stores a pulled kubeflow/... image
TEST_LABEL = "org.tf-cluster.test=from-tfjob"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tf-cluster"
# the CNCF distribution registry the node harness fetches (hack/node/build.sh, hack/node/argocd.py)
REGISTRY_BIN = Path(os.environ.get("REGISTRY_DIR") or CACHE / "registry-debian") / "registry"
# asked when the test starts: `make check` installs podman beside `make test` (images/base/install-builder.sh)
needs_podman = pytest.mark.needs("podman", lambda: bool(shutil.which("podman")), "apt-get install podman")
REGISTRY_WAIT = 900  # seconds: `make check` fetches the registry first (seconds; apt's lock may wait)


@pytest.fixture(scope="session")
def registry_bin() -> Path:
    """The registry binary the node's build makes. While that build holds the registry's lock
    (hack/node/build.sh: `make check` builds it first, beside `make test`), wait for it; a build
    that ends without it, or no build at all, is a missing component (tests/needs.py)."""
    lock, waited = REGISTRY_BIN.parent / ".build.lock", time.monotonic()
    if not REGISTRY_BIN.is_file() and lock.exists():
        with lock.open() as held:
            while time.monotonic() - waited < REGISTRY_WAIT:
                try:
                    fcntl.flock(held, fcntl.LOCK_SH | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    time.sleep(2)
        print(f"[from-tfjob] waited {time.monotonic() - waited:.0f}s for the node's build of {REGISTRY_BIN}")
    if not REGISTRY_BIN.is_file():
        absent(f"the registry binary ({REGISTRY_BIN})", "hack/node/build.sh registry fetches CNCF distribution there")
    return REGISTRY_BIN


def podman(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 or not check, f"podman {' '.join(args)}: {r.stderr}"
    return r


def build_image(tag: str, ctx: Path, entrypoint: list[str], *, arch: str = "") -> None:
    """FROM scratch + one file + the ENTRYPOINT, labelled as this test's (the teardown removes only those)."""
    ctx.mkdir(parents=True, exist_ok=True)
    (ctx / "dist_mnist.py").write_text("print('the dist-mnist stand-in: only its ENTRYPOINT is read')\n")
    (ctx / "Containerfile").write_text(
        f"FROM scratch\nCOPY dist_mnist.py /var/tf_dist_mnist/dist_mnist.py\nENTRYPOINT {json.dumps(entrypoint)}\n"
    )
    podman("build", "-q", "--label", TEST_LABEL, *(["--arch", arch] if arch else []), "-t", tag, str(ctx))


def ours(name: str) -> bool | None:
    """None: no such image here; else whether it carries this test's label."""
    r = podman("image", "inspect", "--format", "json", name, check=False)
    if r.returncode:
        return None
    return (json.loads(r.stdout)[0].get("Labels") or {}).get(TEST_LABEL.split("=")[0]) == "from-tfjob"


@pytest.fixture
def dist_mnist_image(tmp_path):
    """docker.io/kubeflow/tf-dist-mnist-test:latest in the local podman store, removed afterwards. Runs of
    this suite in other checkouts share the store: they take turns (a lock file), and a real image by
    that name (not this test's) is never replaced."""
    with open("/tmp/tf-cluster-test-dist-mnist-image.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if ours(STORED) is False:
            pytest.skip(f"{STORED} is in the podman store and is not this test's: not replacing it")
        build_image(STORED, tmp_path / "image", ENTRY)
        try:
            yield STORED
        finally:
            if ours(STORED):
                podman("rmi", STORED, check=False)


def from_tfjob_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "tf_cluster.cli", "from-tfjob", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})})


def programs(values_file: Path, release: str) -> dict[str, list[str]]:
    """Each task's program as the written values render (real helm, the chart's schema): its
    command after the launcher's `--`, then its args."""
    docs = render(files=[values_file], release=release)
    return {p.name: p.argv[p.argv.index("--") + 1 :] for p in manifests.pods(docs, namespace="default")}


def with_image(path: Path, image: str, worker_args: list[str] | None = None) -> Path:
    """The dist-mnist TFJob with every container's image replaced (and the Worker's args set)."""
    job = yaml.safe_load(DIST_MNIST.read_text())
    for spec in job["spec"]["tfReplicaSpecs"].values():
        spec["template"]["spec"]["containers"][0]["image"] = image
    if worker_args:
        job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["args"] = worker_args
    path.write_text(yaml.safe_dump(job))
    return path


def test_kubernetes_runs_entrypoint_then_args_or_else_cmd():
    run = imageconfig.container_command
    assert run(["python", "/a.py"], ["--x"], []) == (["python", "/a.py", "--x"], [])  # ENTRYPOINT + CMD
    assert run(["python", "/a.py"], ["--x"], ["--y"]) == (["python", "/a.py"], ["--y"])  # args replace CMD
    assert run([], ["python", "/a.py"], []) == (["python", "/a.py"], [])  # CMD alone
    assert run([], ["python", "/a.py"], ["sh", "-c", "x"]) == (["sh", "-c", "x"], [])  # args are the command


@needs_podman
def test_the_entrypoint_comes_from_the_local_podman_store(dist_mnist_image, tmp_path):
    """Kubeflow's dist-mnist TFJob sets no command: the values get its image's ENTRYPOINT from the local
    store, say so, and render (real helm) with it as every task's program; a Worker's args follow it."""
    out = tmp_path / "values.yaml"
    r = from_tfjob_cli(str(DIST_MNIST), "-o", str(out))
    assert r.returncode == 0, r.stderr
    said = f"[from-tfjob] {IMAGE}: ENTRYPOINT {ENTRY} from the local podman store ({STORED})"
    assert said in r.stderr, r.stderr
    assert yaml.safe_load(out.read_text())["command"] == ENTRY
    tasks = programs(out, "dist-mnist-for-e2e-test")
    assert sorted(tasks) == ["chief-0", "ps-0", "worker-0", "worker-1"]
    assert all(argv == ENTRY for argv in tasks.values()), tasks
    # Kubernetes: a container's args replace the image's CMD and follow its ENTRYPOINT
    args = ["--train_steps", "10"]
    r = from_tfjob_cli(str(with_image(tmp_path / "args.yaml", IMAGE, args)), "-o", str(out))
    assert r.returncode == 0, r.stderr
    tasks = programs(out, "dist-mnist-for-e2e-test")
    assert tasks["worker-1"] == ENTRY + args and tasks["chief-0"] == tasks["ps-0"] == ENTRY, tasks
    # --entrypoint still overrides what the image says
    r = from_tfjob_cli(str(DIST_MNIST), "-o", str(out), "--entrypoint", "python /other.py")
    assert r.returncode == 0 and "[from-tfjob]" not in r.stderr, r.stderr
    assert set(map(tuple, programs(out, "dist-mnist-for-e2e-test").values())) == {("python", "/other.py")}


def test_an_image_found_nowhere_writes_nothing_and_names_the_flag(tmp_path):
    """An image in no store, whose registry refuses the connection: exit 2, no file, and the message
    names the image, where it looked and the --entrypoint flag to add."""
    image = "127.0.0.1:9/none/img:1"
    out = tmp_path / "values.yaml"
    started = time.monotonic()
    r = from_tfjob_cli(str(with_image(tmp_path / "tfjob.yaml", image)), "-o", str(out))
    assert r.returncode == 2, r.stderr
    assert not out.exists() and r.stdout == ""
    assert time.monotonic() - started < 30
    for text in (
        f"({image}) sets no command",
        "the registry https://127.0.0.1:9: [Errno 111] Connection refused",
        "  --entrypoint 'python /path/to/train.py'",
        "No values file was written.",
    ):
        assert text in r.stderr, r.stderr
    if shutil.which("podman"):
        assert f"the local podman store: no image {image}" in r.stderr, r.stderr


@pytest.mark.skipif(not shutil.which("docker"), reason="docker is not installed")
def test_without_podman_the_docker_store_is_asked(tmp_path, monkeypatch):
    """Only docker on PATH: its store is the one asked (here a client whose daemon may not run: its
    answer is reported either way), then the registry."""
    (tmp_path / "docker").symlink_to(shutil.which("docker"))
    monkeypatch.setenv("PATH", str(tmp_path))
    assert imageconfig.local_tool() == "docker"
    with pytest.raises(imageconfig.NotFound) as e:
        imageconfig.lookup("127.0.0.1:9/none/img:1")
    assert e.value.tried[0].startswith("the local docker store: no image 127.0.0.1:9/none/img:1"), e.value.tried


def test_a_registry_that_never_answers_is_given_up_on_in_time():
    """A port that accepts connections and never answers: the lookup ends at its deadline."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        host = f"127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        with pytest.raises(imageconfig.NotFound, match="no answer within 1 s"):
            imageconfig.lookup(f"{host}/x/y:1", insecure=[host], timeout=1)
        assert time.monotonic() - started < 5


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def registry(tmp_path: Path, auth: str = ""):
    """The CNCF distribution registry on a free localhost port (plain HTTP), its storage in tmp_path."""
    port = free_port()
    config = tmp_path / "registry.yml"
    config.write_text(
        "version: 0.1\nlog: {level: error}\n"
        f"storage: {{filesystem: {{rootdirectory: {tmp_path / 'storage'}}}}}\n"
        f"http: {{addr: 127.0.0.1:{port}}}\n{auth}"
    )
    log = (tmp_path / "registry.log").open("w")
    proc = subprocess.Popen([str(REGISTRY_BIN), "serve", str(config)], stdout=log, stderr=subprocess.STDOUT)
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=1)
                break
            except urllib.error.HTTPError:  # 401: up, with auth
                break
            except OSError:
                assert proc.poll() is None, (tmp_path / "registry.log").read_text()
                time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


@needs_podman
def test_the_entrypoint_comes_from_a_plain_http_registry_image_index(dist_mnist_image, registry_bin, tmp_path):
    """Pushed to a local registry as an image index (the linux/amd64 image and an arm64 one with another
    ENTRYPOINT) and not in the local store: read over plain HTTP with --insecure-registry, amd64's."""
    arm = "localhost/tf-cluster-test-dist-mnist:arm64"
    build_image(arm, tmp_path / "arm", ["wrong-arch"], arch="arm64")
    listing = f"localhost/tf-cluster-test-dist-mnist-list:{os.getpid()}"
    with registry(tmp_path) as host:
        remote = f"{host}/kubeflow/tf-dist-mnist-test:latest"
        try:
            podman("manifest", "create", listing)
            podman("manifest", "add", listing, f"containers-storage:{STORED}")
            podman("manifest", "add", listing, f"containers-storage:{arm}")
            podman("manifest", "push", "--all", "--tls-verify=false", listing, f"docker://{remote}")
        finally:
            podman("manifest", "rm", listing, check=False)
            podman("rmi", arm, check=False)
        podman("rmi", STORED)  # in the registry only
        assert ours(STORED) is None and ours(remote) is None
        tfjob_file = with_image(tmp_path / "tfjob.yaml", remote)
        out = tmp_path / "values.yaml"
        refused = from_tfjob_cli(str(tfjob_file), "-o", str(out))  # https to a plain-HTTP registry
        assert refused.returncode == 2 and f"add --insecure-registry {host}" in refused.stderr, refused.stderr
        assert not out.exists()
        r = from_tfjob_cli(str(tfjob_file), "-o", str(out), "--insecure-registry", host)
    assert r.returncode == 0, r.stderr
    said = f"[from-tfjob] {remote}: ENTRYPOINT {ENTRY} from the registry http://{host} ({remote}, linux/amd64 of"
    assert said in r.stderr, r.stderr
    assert set(map(tuple, programs(out, "dist-mnist-for-e2e-test").values())) == {tuple(ENTRY)}


class TokenService(http.server.BaseHTTPRequestHandler):
    """The registry's token service (its bearer challenge's realm): a token for any login, each login kept."""

    logins: list[str] = []

    def do_GET(self):  # noqa: N802 (http.server's name)
        TokenService.logins.append(self.headers.get("Authorization") or "")
        body = json.dumps({"token": "test-token", "access_token": "test-token"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@needs_podman
def test_a_registry_bearer_challenge_is_answered_with_the_auth_file_login(dist_mnist_image, registry_bin, tmp_path):
    """The registry asks for a bearer token (its `silly` auth: any token passes, none gets a 401 with the
    challenge); from-tfjob fetches one from the realm with the login $REGISTRY_AUTH_FILE holds."""
    tokens = http.server.ThreadingHTTPServer(("127.0.0.1", 0), TokenService)
    threading.Thread(target=tokens.serve_forever, daemon=True).start()
    realm = f"http://127.0.0.1:{tokens.server_address[1]}/token"
    auth = f"auth: {{silly: {{realm: '{realm}', service: tf-cluster-test}}}}\n"
    try:
        with registry(tmp_path, auth) as host:
            remote = f"{host}/kubeflow/tf-dist-mnist-test:latest"
            podman("push", "-q", "--tls-verify=false", "--creds", "pusher:x", STORED, f"docker://{remote}")
            podman("rmi", STORED)
            with pytest.raises(urllib.error.HTTPError) as unauthorised:
                urllib.request.urlopen(f"http://{host}/v2/kubeflow/tf-dist-mnist-test/manifests/latest", timeout=5)
            assert unauthorised.value.code == 401
            auth_file = tmp_path / "auth.json"
            login = base64.b64encode(b"reader:s3cret").decode()
            auth_file.write_text(json.dumps({"auths": {f"{host}/kubeflow": {"auth": login}}}))
            TokenService.logins.clear()
            out = tmp_path / "values.yaml"
            tfjob_file = with_image(tmp_path / "tfjob.yaml", remote)
            r = from_tfjob_cli(
                str(tfjob_file), "-o", str(out), "--insecure-registry", host, env={"REGISTRY_AUTH_FILE": str(auth_file)}
            )
    finally:
        tokens.shutdown()
    assert r.returncode == 0, r.stderr
    assert f"[from-tfjob] {remote}: ENTRYPOINT {ENTRY} from the registry http://{host}" in r.stderr, r.stderr
    assert TokenService.logins == [f"Basic {login}"]
    assert yaml.safe_load(out.read_text())["command"] == ENTRY


def test_logins_are_read_as_podman_and_docker_write_them(tmp_path, monkeypatch):
    """auths keys: podman's HOST[/NAMESPACE] (the most specific wins), docker's https://index.docker.io/v1/."""

    def b64(s: str) -> str:
        return base64.b64encode(s.encode()).decode()

    podman_file, docker_dir = tmp_path / "auth.json", tmp_path / "docker"
    podman_file.write_text(
        json.dumps({"auths": {"quay.io": {"auth": b64("any:1")}, "quay.io/team": {"auth": b64("team:2")}}})
    )
    docker_dir.mkdir()
    (docker_dir / "config.json").write_text(
        json.dumps({"auths": {"https://index.docker.io/v1/": {"auth": b64("hub:3")}}})
    )
    monkeypatch.setenv("REGISTRY_AUTH_FILE", str(podman_file))
    monkeypatch.setenv("DOCKER_CONFIG", str(docker_dir))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    found = imageconfig.credentials
    assert (found("quay.io", "team/img").username, found("quay.io", "other/img").username) == ("team", "any")
    hub = found(*[imageconfig.parse("kubeflow/tf-dist-mnist-test").registry, "kubeflow/tf-dist-mnist-test"])
    assert hub is not None and (hub.username, hub.password, hub.file) == ("hub", "3", docker_dir / "config.json")
    assert found("ghcr.io", "x/y") is None


@pytest.mark.parametrize("account", ["default", "trainer"])
def test_a_tfjobs_service_account_is_granted_only_when_named_and_the_notes_say_what(account):
    """The namespace's `default` account is never carried over (the chart would grant it, so every
    pod running as it, the launcher's Role); a named account is, with serviceAccount.shareGrants
    and a note naming each right it gets (issue 44)."""
    (job,) = tfjob.load((UPSTREAM / "simple.yaml").read_text(), "simple.yaml")
    for spec in job["spec"]["tfReplicaSpecs"].values():
        spec["template"]["spec"]["serviceAccountName"] = account
    conv = tfjob.convert(job, entrypoint=["python", "/train.py"])
    said = notes(conv)
    docs = render(conv.values)  # the converted values render: nothing refused
    bindings = [d for d in docs if d["kind"] == "RoleBinding"]
    subjects = {s["name"] for b in bindings for s in b["subjects"]}
    if account == "default":
        assert "serviceAccount" not in conv.values
        assert "default: not carried over" in said, said
        assert "default" not in subjects and subjects, subjects  # the release's own account only
    else:
        assert conv.values["serviceAccount"] == {"create": False, "name": "trainer", "shareGrants": True}
        assert "list and watch the namespace's pods" in said and "every pod running as trainer" in said, said
        assert subjects == {"trainer"}


def test_a_tfjobs_volumes_init_containers_and_sidecars_are_carried_over_and_render():
    """Issue 47: what the chart's three storage slots do not hold becomes its pod extensions: a
    Secret and a ConfigMap volume (extraVolumes, mounted where the TFJob mounted them), the pod's
    second container (a native sidecar) and its init containers; a volume placed in a slot is
    referred to by the slot's name, one named like a chart volume is renamed."""
    job = yaml.safe_load((UPSTREAM / "simple.yaml").read_text())
    pod = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]
    pod["volumes"] = [
        {"name": "ckpt", "persistentVolumeClaim": {"claimName": "ckpt-claim"}},
        {"name": "creds", "secret": {"secretName": "bucket-creds"}},
        {"name": "code", "configMap": {"name": "train-code"}},
        {"name": "unused", "emptyDir": {}},
    ]
    pod["containers"][0]["volumeMounts"] = [
        {"name": "ckpt", "mountPath": "/ckpt"},
        {"name": "creds", "mountPath": "/var/run/creds", "readOnly": True},
    ]
    pod["initContainers"] = [
        {"name": "fetch", "image": "busybox:1.37", "volumeMounts": [{"name": "ckpt", "mountPath": "/out"}]},
        {"name": "proxy", "image": "envoy:1.31", "restartPolicy": "Always"},
    ]
    pod["containers"].append(
        {"name": "shipper", "image": "fluent-bit:3.2", "volumeMounts": [{"name": "code", "mountPath": "/cfg"}]}
    )
    conv = tfjob.convert(job, entrypoint=["python", "/train.py"])
    ext = conv.values["roleDefaults"]
    assert ext["extraVolumes"] == [
        {"name": "creds", "secret": {"secretName": "bucket-creds"}},
        {"name": "tfjob-code", "configMap": {"name": "train-code"}},
    ]
    assert ext["extraVolumeMounts"] == [{"name": "creds", "mountPath": "/var/run/creds", "readOnly": True}]
    assert [c["name"] for c in ext["initContainers"]] == ["fetch"]
    assert ext["initContainers"][0]["volumeMounts"] == [{"name": "checkpoints", "mountPath": "/out"}]
    assert [c["name"] for c in ext["sidecars"]] == ["shipper", "proxy"]
    assert ext["sidecars"][0]["volumeMounts"] == [{"name": "tfjob-code", "mountPath": "/cfg"}]
    said = notes(conv)
    assert "volumes[unused]: mounted by no container: not carried over" in said, said
    assert "containers[shipper]: -> sidecars: a Kubernetes native sidecar" in said, said
    assert "volumes[code]: a configMap volume -> extraVolumes as tfjob-code" in said, said
    (worker,) = [d for d in render(conv.values) if d["kind"] == "Job"]
    spec = worker["spec"]["template"]["spec"]
    assert [c["name"] for c in spec["initContainers"]] == ["tf-cluster-agent", "shipper", "proxy", "packages", "fetch"]
    assert {v["name"] for v in spec["volumes"]} >= {"checkpoints", "creds", "tfjob-code"}
