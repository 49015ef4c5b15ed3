"""Run identity: a Job's name changes if and only if what it runs changes (its pod template or an
immutable Job field), so an upgrade never hits `spec.template: field is immutable` and never replaces
a training whose pods would run the same (Argo CD prunes what stops rendering)."""

from __future__ import annotations

import copy
import re
import shutil

import pytest
import yaml

from rendering import render
from tf_cluster import CHART, ROOT, helm
from tf_cluster.errors import RenderError

# Every role present, so every value has a pod to reach.
BASE = {
    **yaml.safe_load((ROOT / "values-examples" / "parameter-server-evaluator.yaml").read_text()),
    "tensorboard": {"enabled": True},
}
MUTABLE = ("activeDeadlineSeconds", "ttlSecondsAfterFinished")  # Kubernetes updates these on a live Job
SUFFIX = re.compile(r"-[0-9a-f]{6}\b|(?<=run: )[0-9a-f]{6}\b")


def leaves(tree, path=()):
    if isinstance(tree, dict) and tree:
        for k, v in tree.items():
            yield from leaves(v, (*path, k))
    else:
        yield path, tree


def mutated(value):
    """A different value of the same kind (None when there is no sensible one)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, str):
        return value + "x" if value else "x"
    if value is None:  # optional numbers (deadlines, maxFailedIndexes)
        return 100
    return None  # lists and empty maps: covered by the structured cases below


def with_value(values: dict, path: tuple, value) -> dict:
    out = copy.deepcopy(values)
    node = out
    for k in path[:-1]:
        node = node.setdefault(k, {})
    node[path[-1]] = value
    return out


def jobs(docs) -> dict[str, dict]:
    """role -> Job, with the run suffix masked in everything but the name; what its pods run is its
    spec and the run's environment (the ConfigMap every pod takes by envFrom)."""
    (run_env,) = [
        d.get("data") or {}
        for d in docs
        if d["kind"] == "ConfigMap" and d["metadata"]["labels"].get("app.kubernetes.io/component") == "tf-config"
    ]
    out = {}
    for d in docs:
        if d["kind"] == "Job":
            role = d["metadata"]["labels"]["app.kubernetes.io/component"]
            spec = {k: v for k, v in d["spec"].items() if k not in MUTABLE}
            masked = {**run_env, **({"TF_CLUSTER_RUN": "RUN"} if "TF_CLUSTER_RUN" in run_env else {})}
            runs = yaml.safe_dump({"spec": spec, "runEnv": masked})
            out[role] = {"name": d["metadata"]["name"], "runs": SUFFIX.sub("-RUN", runs)}
    return out


def test_every_value_that_reaches_a_pod_renames_and_every_other_keeps_the_run():
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    before = jobs(render(BASE))
    renamed, kept, refused = [], [], []
    for path, default in leaves(defaults):
        node = BASE
        for k in path:
            node = node.get(k, default) if isinstance(node, dict) else default
        new = mutated(node)
        if new is None:
            continue
        try:
            after = jobs(render(with_value(BASE, path, new)))
        except RenderError:
            refused.append(".".join(path))  # e.g. an enum: the schema refuses the value
            continue
        runs_changed = any(before[r]["runs"] != after.get(r, {}).get("runs") for r in before) or set(before) != set(
            after
        )
        names_changed = {before[r]["name"] for r in before} != {a["name"] for a in after.values()}
        key = ".".join(map(str, path))
        assert names_changed == runs_changed, (
            f"{key}: pods {'changed' if runs_changed else 'same'}, Job names {'changed' if names_changed else 'same'}"
        )
        (renamed if names_changed else kept).append(key)
    # the sweep covered both directions broadly
    assert "serviceAccount.name" in renamed and "port" in renamed
    assert "serviceAccount.create" in refused  # alone, it would grant the namespace's `default` the Roles
    assert "tensorboard.port" in kept and "networkPolicy.enabled" in kept and "job.activeDeadlineSeconds" in kept
    assert len(renamed) >= 25 and len(kept) >= 8, (renamed, kept, refused)
    print(f"renamed ({len(renamed)}): {renamed}\nkept ({len(kept)}): {kept}\nrefused ({len(refused)}): {refused}")


@pytest.mark.parametrize(
    "change",
    [
        {"roleDefaults": {"tolerations": [{"key": "gpu", "operator": "Exists"}]}},
        {"roles": {"worker": {"env": [{"name": "EPOCHS", "value": "9"}]}}},
        {"image": {"tag": "other"}},
        {"jobPolicies": {"ps": {"backoffLimitPerIndex": 0}}},
    ],
    ids=["roleDefaults", "role-env", "image", "immutable-job-field"],
)
def test_structured_changes_that_reach_pods_start_a_new_run(change, helm_major):
    from rendering import deep_merge

    before = {d["metadata"]["name"] for d in render(BASE, helm_major=helm_major) if d["kind"] == "Job"}
    after = {
        d["metadata"]["name"] for d in render(deep_merge(BASE, change), helm_major=helm_major) if d["kind"] == "Job"
    }
    assert before.isdisjoint(after)


def test_a_chart_version_bump_alone_changes_only_the_chart_label(tmp_path, helm_major):
    bumped = tmp_path / "tf-cluster"
    shutil.copytree(CHART, bumped)
    chart = yaml.safe_load((bumped / "Chart.yaml").read_text())
    text = (bumped / "Chart.yaml").read_text().replace(f"version: {chart['version']}", "version: 99.0.0")
    (bumped / "Chart.yaml").write_text(text)
    values = helm.Values.of([ROOT / "values-examples" / "parameter-server-evaluator.yaml"])
    old = helm.Helm(helm_major).template("tf", values)
    new = helm.Helm(helm_major).template("tf", values, chart=bumped)
    changed = [(a, b) for a, b in zip(old.splitlines(), new.splitlines(), strict=True) if a != b]
    assert changed and all("helm.sh/chart: tf-cluster-" in a and "99.0.0" in b for a, b in changed[:-1]), changed
    assert changed[-1] == changed[-1]  # NOTES are not rendered by `helm template`; every change is a chart label
    assert all("helm.sh/chart" in a for a, _ in changed)
