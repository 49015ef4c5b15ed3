"""Third-party programs (tests/local/programs/third_party, see its SOURCES.md) on the real node,
brought in with `tf-cluster smoke --script`, as tests/local/test_third_party.py runs them locally:
what passes locally passes here, and the parameter-server tutorial's shared-/tmp assumption
fails here for the same reason it fails under run-local."""

from __future__ import annotations

import subprocess
import sys

from test_cluster import KUBECONFIG, SMALL, log, pods_of, say

from tf_cluster import ROOT

PROGRAMS = ROOT / "tests" / "local" / "programs" / "third_party"
PS = ["--set", "strategy=parameterServer", "--set", "roles.chief.replicas=1"]
PS += ["--set", "roles.worker.replicas=2", "--set", "roles.ps.replicas=1"]


def smoke(ns: str, release: str, program: str, flags: list[str], args: list[str] = ()) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "tf_cluster.cli", "smoke", "--script", str(PROGRAMS / program), "-f", str(SMALL)]
    argv += [*flags, "--kubeconfig", KUBECONFIG, "-n", ns, "--release", release, "--keep", "--timeout", "600"]
    r = subprocess.run([*argv, "--", *args] if args else argv, capture_output=True, text=True)
    print(r.stdout[-2500:])
    return r


def test_kubeflow_multi_worker_keras_example_passes_on_the_node(api, ns):
    args = ["--saved_model_dir", "/mnt/checkpoints/saved_model/", "--checkpoint_dir", "/mnt/checkpoints/checkpoint"]
    flags = ["--set", "roles.worker.replicas=2", "--set", "storage.checkpoints.type=pvc"]
    r = smoke(ns, "kfmwms", "kubeflow_mwms_keras.py", flags, args)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "every Job Complete" in r.stdout
    for p in pods_of(api, ns, "-worker-"):
        assert "Epoch 10/10" in log(api, ns, p.metadata.name)
    say("kubeflow MWMS example passed")


def test_kubeflow_dist_mnist_parameter_server_example_passes_on_the_node(api, ns):
    r = smoke(ns, "kfps", "kubeflow_dist_mnist_ps.py", PS, ["--epochs", "1", "--batch_size", "600"])
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    (chief,) = pods_of(api, ns, "-chief-")
    assert "Evaluation accuracy" in log(api, ns, chief.metadata.name)
    say("kubeflow dist-mnist PS example passed")


def test_the_parameter_server_tutorial_fails_on_the_node_as_it_does_locally(api, ns):
    """Its chief checkpoints into /tmp/my_working_dir, which only the chief's pod has; the ps pod
    runs the save for its variables and cannot write there (NotFoundError ... variables_temp)."""
    r = smoke(ns, "pstut", "ps_tutorial_fit.py", [*PS, "--set", "job.backoffLimitPerIndex=0", "--no-helm-test"])
    assert r.returncode == 7, r.stdout[-4000:] + r.stderr[-2000:]
    (chief,) = pods_of(api, ns, "-chief-")
    text = log(api, ns, chief.metadata.name)
    assert "NotFoundError" in text and "/tmp/my_working_dir/ckpt" in text, text[-3000:]
    say("the PS tutorial failed on the node as it does under run-local")
