"""The cluster e2e suite runs against a real cluster: the one node `make e2e` brings
up here (the harness in hack/node/), or any cluster whose nodes have the trainer
image, named by TF_CLUSTER_E2E_KUBECONFIG. pytest-helm-charts gives the cluster
and namespace fixtures; our own waiters read Job conditions by type."""

from __future__ import annotations

import hashlib
import os
import re
import sys
import time
from pathlib import Path

import pytest

from tf_cluster import kube

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "hack"))  # the node harness, hack/node
from node import config as node_config  # noqa: E402
from node import policy  # noqa: E402

KUBECONFIG = os.environ.get("TF_CLUSTER_E2E_KUBECONFIG", "")


def pytest_collection_modifyitems(config, items):
    if KUBECONFIG and Path(KUBECONFIG).is_file():
        return
    skip = pytest.mark.skip(
        reason="needs a real cluster: `make e2e` brings one node up here and runs this suite "
        "(or set TF_CLUSTER_E2E_KUBECONFIG to a cluster whose nodes have the image)"
    )
    for item in items:
        if "tests/e2e/cluster" in str(item.fspath):
            item.add_marker(skip)


@pytest.fixture(scope="module")
def kube_config() -> str:
    """Overrides pytest-helm-charts' fixture: the e2e cluster's kubeconfig, never the user's current one."""
    return KUBECONFIG


@pytest.fixture
def api():
    return kube.client_for(KUBECONFIG)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    """Each phase's report on the test item (`item.rep_call`): the `ns` fixture reads it."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


def pods_story(core, namespace: str) -> str:
    """Every pod of a namespace, oldest first: node, phase, deletion, how its containers ended, its
    conditions; then the Warning events in time order. Printed when a test fails, so CI's log tells
    which incarnation of a task did what."""
    lines = []
    for p in sorted(core.list_namespaced_pod(namespace).items, key=lambda p: p.metadata.creation_timestamp):
        ended = [
            f"{cs.name} exit {cs.state.terminated.exit_code} ({cs.state.terminated.reason})"
            for cs in p.status.container_statuses or []
            if cs.state and cs.state.terminated
        ]
        conditions = [f"{c.type}={c.status}" + (f"({c.reason})" if c.reason else "") for c in p.status.conditions or []]
        deleted = f" deleted {p.metadata.deletion_timestamp:%H:%M:%S}" if p.metadata.deletion_timestamp else ""
        lines.append(
            f"  {p.metadata.name} created {p.metadata.creation_timestamp:%H:%M:%S} on {p.spec.node_name or '-'}: "
            f"{p.status.phase}{f' {p.status.reason}' if p.status.reason else ''}{deleted}; "
            f"{', '.join(ended) or 'no container ended'}; {' '.join(conditions)}"
        )
    return "\n".join(lines + kube.warning_events(core, namespace, last=30))


@pytest.fixture
def ns(kube_cluster, request):
    """A fresh namespace per test (created through pytest-helm-charts). Afterwards its pods are
    removed at once and the namespace deleted without waiting for the namespace controller
    (~11 s a test, measured: CI's time goes to scenarios instead); `make e2e` stops the node anyway."""
    from kubernetes import client
    from pytest_helm_charts.k8s.namespace import ensure_namespace_exists

    digest = hashlib.sha256(f"{request.node.nodeid}{time.time()}".encode()).hexdigest()[:5]  # unique per run
    name = "e2e-" + re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:36].strip("-") + "-" + digest
    ensure_namespace_exists(kube_cluster.kube_client, name)
    yield name
    core = client.CoreV1Api(kube.client_for(KUBECONFIG))
    if getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed:
        try:
            print(f"\n[e2e] namespace {name} when the test failed:\n{pods_story(core, name)}", flush=True)
        except Exception as e:  # noqa: BLE001 - the story is a help; the failure is already reported
            print(f"\n[e2e] namespace {name}: could not read its pods ({e})", flush=True)
    core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
    core.delete_namespace(name)


@pytest.fixture(autouse=True)
def packets_dropped_by_the_policy_engine():
    """On the harness node with Cilium: after each test, the packets the datapath dropped during it,
    by reason (cilium_drop_count_total), so a timeout can be told from a policy drop in CI's log;
    each dropped packet is in the agent's drop log (node/policy.py, DROP_LOG)."""
    try:
        on_node = node_config.is_this_node(KUBECONFIG) and node_config.POLICY_ENGINE == "cilium"
        before = policy.drops() if on_node else None
    except OSError:
        before = None  # the agent is not up (a node without it): nothing to count
    yield
    if before is None:
        return
    after = policy.drops()
    delta = {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)}
    text = ", ".join(f"{int(n)} ({k})" for k, n in sorted(delta.items())) or "none"
    print(f"\n[e2e] packets Cilium dropped during the test: {text}", flush=True)
