"""The README's first block, as a new user runs it, on the real cluster: `helm install` of the
example with no other values pulls TensorFlow's official image (on this machine the node harness's
stand-in, built from its recipe under its name: no registry serves images here), each pod adds
tf-keras and TensorBoard's summary package at its start, the release trains to completion, and
`helm test` passes."""

from __future__ import annotations

import re
import shlex
import subprocess

from test_cluster import KUBECONFIG, all_complete, log, reported, say, wait

from tf_cluster import ROOT, helm, kube

README = ROOT / "README.md"
OFFICIAL = "docker.io/tensorflow/tensorflow:2.21.0"


def first_block() -> list[str]:
    """The command lines of README.md's first `sh` block under "Install on a cluster"."""
    section = README.read_text().split("## Install on a cluster", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block, "README.md's 'Install on a cluster' has no sh block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def run(line: str, timeout: float) -> subprocess.CompletedProcess:
    """A `helm ...` line of the README, run from the checkout with the project's Helm 4 on the cluster."""
    verb, *args = shlex.split(line)[1:]
    argv = helm.Helm("4", kubeconfig=KUBECONFIG).argv(verb, *args)
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_the_readme_first_install_trains_under_the_official_image(api):
    from kubernetes import client

    install, watch, check = first_block()
    argv = shlex.split(install)
    assert argv[0] == "helm" and argv[1] == "install" and "--values" not in argv and "--set" not in argv, install
    assert [a for a in argv if a.startswith("-f")] == ["-f"], f"one values file, the example's: {install}"
    release, ns = argv[2], argv[argv.index("--namespace") + 1]
    assert f"app.kubernetes.io/instance={release}" in watch and f"-n {ns}" in watch, watch
    core = client.CoreV1Api(api)
    names = {n.metadata.name for n in core.list_namespace().items}
    assert ns not in names, f"namespace {ns} exists on this cluster: the README's block creates it; delete it first"
    try:
        r = run(install, 120)
        assert r.returncode == 0, r.stdout + r.stderr
        snap = wait(api, ns, release, timeout=600)
        all_complete(snap, api, ns, release)
        pods = core.list_namespaced_pod(ns, label_selector=f"app.kubernetes.io/instance={release}").items
        workers = [p for p in pods if p.metadata.labels.get("app.kubernetes.io/component") == "worker"]
        assert len(workers) == 2, [p.metadata.name for p in pods]
        for p in workers:
            images = {c.image for c in [*p.spec.init_containers, *p.spec.containers]}
            assert images == {OFFICIAL}, images
            added = log(api, ns, p.metadata.name, container="packages")
            lacks = "tensorboard==2.21.0 tf-keras==2.21.0"
            assert f"the image lacks {lacks}" in added and f"installed {lacks} in" in added, added
            assert reported(api, ns, p.metadata.name).progress["epoch"] == 5
            # the kubelet composed TF_CONFIG from the run's ConfigMap and the pod's index (the launcher's first line)
            index = p.metadata.annotations["batch.kubernetes.io/job-completion-index"]
            first = log(api, ns, p.metadata.name).splitlines()[0]
            assert f"] TF_CONFIG: task worker:{index} of a cluster of worker 2 (" in first, first
        seconds = re.search(r"installed .* in ([0-9.]+)s", log(api, ns, workers[0].metadata.name, "packages"))
        r = run(check, 300)
        assert r.returncode == 0 and re.search(r"Phase:\s+Succeeded", r.stdout), r.stdout + r.stderr
        say(f"README's first install: trained 5 epochs under {OFFICIAL}; packages added in {seconds.group(1)}s a pod")
        r = run(f"helm uninstall {release} -n {ns} --wait", 300)
        assert r.returncode == 0, r.stderr
        assert kube.release_objects(api, ns, release) == []
    finally:
        run(f"helm uninstall {release} -n {ns} --wait", 300)
        core.delete_namespace(ns)  # the README's block created it (asserted absent above)
