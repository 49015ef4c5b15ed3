"""A container's environment as the kubelet composes it (tf_cluster.manifests.resolve_env and
env_entries), for what the chart relies on: `envFrom` first, a later source's key over an earlier's,
then `env` over both, `$(VAR)` expanding to what `envFrom` gave, `envFrom` values left unexpanded,
a key that is no variable name skipped (pkg/kubelet/kubelet_pods.go makeEnvironmentVariables)."""

from __future__ import annotations

from tf_cluster import manifests

MAPS = {
    "users": {"HOME": "/home/me", "EPOCHS": "5", "with space": "skipped", "RAW": "$(EPOCHS)"},
    "run": {"HOME": "/tmp", "TF_CLUSTER_SPEC": '{"worker":["w-0:2222","w-1:2222"]}'},
}
INDEX = {"fieldRef": {"fieldPath": f"metadata.annotations['{manifests.INDEX_ANNOTATION}']"}}
TF_CONFIG = '{"cluster":$(TF_CLUSTER_SPEC),"task":{"type":"worker","index":$(TF_TASK_INDEX)}}'
CONTAINER = {
    "envFrom": [{"configMapRef": {"name": "users"}}, {"configMapRef": {"name": "run"}}],
    "env": [
        {"name": "TF_TASK_INDEX", "valueFrom": INDEX},
        {"name": "TF_CONFIG", "value": TF_CONFIG},
        {"name": "EPOCHS", "value": "7"},
        {"name": "LOG", "value": "$(HOME)/log-$(EPOCHS)"},
    ],
}  # fmt: skip


def test_env_from_first_the_last_source_winning_then_env_over_it():
    env = manifests.resolve_env(CONTAINER, index=1, namespace="ns", node_cpus=1, config_maps=MAPS)
    assert env["HOME"] == "/tmp"  # the run's ConfigMap is the later source
    assert env["EPOCHS"] == "7"  # an inline entry replaces what envFrom gave
    assert env["LOG"] == "/tmp/log-7"  # $(VAR) sees envFrom's values and earlier entries
    assert env["TF_CONFIG"] == '{"cluster":{"worker":["w-0:2222","w-1:2222"]},"task":{"type":"worker","index":1}}'
    assert env["RAW"] == "$(EPOCHS)"  # envFrom's values are not expanded
    assert "with space" not in env  # no variable name: the kubelet skips it


def test_a_source_not_in_the_manifests_gives_nothing():
    env = manifests.resolve_env(CONTAINER, index=0, namespace="ns", node_cpus=1, config_maps={"users": MAPS["users"]})
    assert env["HOME"] == "/home/me" and "TF_CLUSTER_SPEC" not in env
    assert env["TF_CONFIG"].startswith('{"cluster":$(TF_CLUSTER_SPEC)')  # an unknown reference stays as written


def test_env_entries_are_the_inline_ones_over_what_env_from_gives():
    entries = manifests.env_entries(CONTAINER, MAPS)
    assert entries["HOME"] == {"name": "HOME", "value": "/tmp"}
    assert entries["EPOCHS"] == {"name": "EPOCHS", "value": "7"}
    assert "valueFrom" in entries["TF_TASK_INDEX"]  # unresolved: the downward API's entry as written
    prefixed = {"envFrom": [{"configMapRef": {"name": "run"}, "prefix": "RUN_"}]}
    assert set(manifests.env_entries(prefixed, MAPS)) == {"RUN_HOME", "RUN_TF_CLUSTER_SPEC"}
