"""Releases on the real node: the chart packaged reproducibly (`tf-cluster package`), signed, pushed
to the node's OCI registry (the CNCF distribution registry), installed by version, by digest and
with --verify, and a release of the previous published version upgraded to this one."""

from __future__ import annotations

import os
import re

import pytest
from node.argocd import REGISTRY  # hack/node (the e2e harness)
from test_cluster import EX, SMALL, helm_in, pods_of, say

from tf_cluster import CHART, helm, kube, release

REMOTE = f"oci://{REGISTRY}/releases"
CHART_REF = f"{REMOTE}/tf-cluster"


@pytest.fixture(scope="module")
def published(tmp_path_factory, signing_keyrings) -> dict:
    """The release before this chart version (from charts/releases.yaml) and this one, packaged, signed, pushed."""
    secring, pubring = signing_keyrings
    # Helm caches pulled charts by name and version: a 0.3.0 pulled by an earlier run (signed by that
    # run's key) would be verified instead of this run's push. A cache of this run's own:
    os.environ["HELM_CACHE_HOME"] = str(tmp_path_factory.mktemp("helm-cache"))
    last = release.last_release(below=release.chart_version())
    assert last, "charts/releases.yaml records no release below this chart version"
    work = tmp_path_factory.mktemp("release")
    old = release.export(last, work / "old" / "tf-cluster")  # from git's objects: no tag needed
    out: dict = {"previous": last.version, "current": release.chart_version(), "pubring": pubring, "digest": {}}
    out["launcher_changed"] = release.git("rev-parse", f"{last.tree}:files") != release.git(
        "rev-parse", f"{release.chart_tree()}:files"
    )
    for version, chart, epoch in ((last.version, old, last.epoch), (out["current"], CHART, None)):
        tgz = release.package(work / version, chart=chart, epoch=epoch, sign_key="tf-cluster test", keyring=secring)
        r = helm.Helm("4").push(tgz, REMOTE, plain_http=True)
        out["digest"][version] = re.search(r"Digest: (sha256:[0-9a-f]{64})", r.stdout + r.stderr).group(1)
        say(f"pushed {tgz.name} ({out['digest'][version][:19]}...) to {REMOTE}")
    return out


def values():
    return helm.Values.of([EX / "mwms-cpu.yaml", SMALL])


def job_names(api, ns, release_name: str) -> set[str]:
    """The release's Jobs, leaving out those already being deleted (an upgrade's old run)."""
    return {n for n in kube.release_objects(api, ns, release_name, count_terminating=False) if n.startswith("Job/")}


def wait_for_pods(api, ns, job_substr: str, n: int, timeout: float = 120) -> set[str]:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        uids = {p.metadata.uid for p in pods_of(api, ns, job_substr)}
        if len(uids) >= n:
            return uids
        time.sleep(1)
    pytest.fail(f"fewer than {n} pods of {job_substr} after {timeout}s")


def test_install_by_version_with_verify_then_upgrade_from_the_previous_version(api, ns, published, tmp_path):
    h = helm_in(ns)
    prev, cur = published["previous"], published["current"]
    # the examples' scheduling.singleNode came in 1.0.0: a previous version older than that does not
    # know it (its schema refuses it), one since then needs it (a ReadWriteOnce claim, two pods)
    import yaml

    example = yaml.safe_load((EX / "mwms-cpu.yaml").read_text())
    if tuple(int(x) for x in prev.split(".")[:2]) < (1, 0):
        example.pop("scheduling", None)
    (tmp_path / "previous.yaml").write_text(yaml.safe_dump(example))
    old = helm.Values.of([tmp_path / "previous.yaml", SMALL])
    r = h.run("install", "rel", CHART_REF, "--version", prev, *old.argv(), "--plain-http")
    assert r.returncode == 0, r.stderr
    before = job_names(api, ns, "rel")
    assert before, kube.diagnostics(api, ns, "rel")
    r = h.run(
        "upgrade",
        "rel",
        CHART_REF,
        "--version",
        cur,
        *values().argv(),
        "--plain-http",
        "--verify",
        "--keyring",
        published["pubring"],
    )
    assert r.returncode == 0, r.stderr
    meta = h.run("list", "--output", "json")
    assert f'"chart":"tf-cluster-{cur}"' in meta.stdout.replace(" ", "")
    after = job_names(api, ns, "rel")
    # 0.3.0's launcher differs from 0.2.1's, and the launcher's checksum is in every pod: a new run
    # (CHANGELOG "Upgrade notes"); the previous run's Jobs are gone with the old manifest.
    if published["launcher_changed"]:
        assert after and after.isdisjoint(before), (before, after)
    else:
        assert after == before
    say(f"installed {prev} from {REMOTE}, upgraded to {cur} with --verify: Jobs {sorted(before)} -> {sorted(after)}")
    assert h.uninstall("rel", wait=True, timeout="5m").returncode == 0  # a training still runs: end it here,
    # not in the namespace fixture's teardown (120 s, too short for running pods and their claims)


@pytest.mark.extended  # CI keeps install by version, upgrade with --verify, and the tampered package
def test_install_by_digest_and_a_version_only_bump_keeps_the_running_jobs(api, ns, published, tmp_path):
    h = helm_in(ns)
    cur = published["current"]
    ref = f"{CHART_REF}@{published['digest'][cur]}"
    r = h.run("install", "dig", ref, *values().argv(), "--plain-http")
    assert r.returncode == 0, r.stderr
    jobs = job_names(api, ns, "dig")
    pods = wait_for_pods(api, ns, "dig-tf-cluster-worker", 2)
    # The same chart under a new version number (as a README-only release would be): same pods, same Jobs.
    bumped = release.stage(tmp_path / "bumped" / "tf-cluster", release.source_epoch())
    chart_yaml = bumped / "Chart.yaml"
    chart_yaml.write_text(chart_yaml.read_text().replace(f"version: {cur}", "version: 99.0.0"))
    r = h.run("upgrade", "dig", bumped, *values().argv())
    assert r.returncode == 0, r.stderr
    assert job_names(api, ns, "dig") == jobs
    assert pods <= {p.metadata.uid for p in pods_of(api, ns, "dig-tf-cluster-worker")}  # not restarted
    say(f"installed by digest {published['digest'][cur][:19]}...; a version-only bump kept {sorted(jobs)}")
    assert h.uninstall("dig", wait=True, timeout="5m").returncode == 0


def test_a_tampered_package_is_refused_by_install_verify(ns, published, tmp_path):
    h = helm_in(ns)
    r = h.run("pull", CHART_REF, "--version", published["current"], "--plain-http", "--prov", "-d", tmp_path)
    assert r.returncode == 0, r.stderr
    (tgz,) = tmp_path.glob("*.tgz")
    assert tgz.with_name(tgz.name + ".prov").is_file(), "the .prov was not pushed with the package"
    data = bytearray(tgz.read_bytes())
    data[len(data) // 2] ^= 0xFF
    tgz.write_bytes(bytes(data))
    r = h.run("install", "bad", tgz, "--verify", "--keyring", published["pubring"], *values().argv())
    assert r.returncode != 0 and "sha256" in (r.stderr + r.stdout).lower(), r.stderr
    assert "bad" not in h.releases()  # nothing half-installed, in any state
