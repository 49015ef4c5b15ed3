"""Releases a platform team can pin: the version policy, the changelog as release notes, packages
that are byte-identical from any clone, signed provenance that verifies (real helm, real gpg)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

from tf_cluster import CHART, ROOT, helm, release
from tf_cluster.errors import UsageError


def clone(dest, *flags):
    subprocess.run(["git", "clone", "-q", *flags, str(ROOT), str(dest)], check=True)
    for k, v in (("user.email", "test@example.invalid"), ("user.name", "test")):
        subprocess.run(["git", "-C", str(dest), "config", k, v], check=True)
    return dest


def commit(repo, message):
    subprocess.run(["git", "-C", str(repo), "add", "--all"], check=True)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", message], check=True)


def package(repo, out, major="4", **sign) -> Path:
    return release.package(out, chart=repo / "charts" / "tf-cluster", major=major, **sign)


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ----------------------------------------------------------------- changelog


def dating_problems(sections: dict[str, release.Section], recorded: set[str], chart: str) -> list[str]:
    """Where the CHANGELOG and charts/releases.yaml disagree on what is released: a version is
    released when `make release` recorded it, and its heading is dated then, not before."""
    dated = {v for v, s in sections.items() if s.date}
    found = [f"{v}: dated in CHANGELOG.md, not in charts/releases.yaml" for v in sorted(dated - recorded)]
    found += [f"{v}: in charts/releases.yaml, no dated CHANGELOG.md section" for v in sorted(recorded - dated)]
    if chart not in sections:
        found.append(f"{chart}: the chart's version has no CHANGELOG.md section")
    return found


def test_the_changelog_dates_exactly_the_recorded_releases():
    sections = release.changelog((CHART / "CHANGELOG.md").read_text())
    recorded = {r.version for r in release.releases()}
    assert recorded, "charts/releases.yaml records no release"
    assert dating_problems(sections, recorded, release.chart_version()) == []


@pytest.mark.parametrize(
    "headings,recorded,found",
    [
        (["## [1.1.0]", "## [1.0.0] - 2026-01-01"], {"1.0.0"}, []),  # 1.1.0 worked on, not yet released
        (["## [1.1.0] - 2026-01-02", "## [1.0.0] - 2026-01-01"], {"1.0.0"}, ["1.1.0: dated in CHANGELOG.md, not"]),
        (["## [1.1.0]", "## [1.0.0]"], {"1.0.0"}, ["1.0.0: in charts/releases.yaml, no dated"]),
        (["## [1.1.0]", "## [1.0.0] - 2026-01-01"], {"1.0.0", "0.9.0"}, ["0.9.0: in charts/releases.yaml, no"]),
        (["## [1.0.0] - 2026-01-01"], {"1.0.0"}, ["1.1.0: the chart's version has no"]),
    ],
)
def test_a_dated_version_without_a_record_or_a_record_without_a_date_is_found(headings, recorded, found):
    text = "## [Unreleased]\n\n" + "\n\n".join(headings) + "\n"
    problems = dating_problems(release.changelog(text), recorded, chart="1.1.0")
    assert len(problems) == len(found) and all(p.startswith(f) for f, p in zip(found, problems, strict=True)), problems


def test_release_tags_where_present_point_at_the_recorded_trees():
    """Clones without tags (CI checkouts) rely on the record alone; where tags are, they agree."""
    tags = set(release.git("tag", "--list", f"{release.TAG_PREFIX}*").split())
    checked = []
    for r in release.releases():
        if r.tag in tags:
            assert release.git("rev-parse", f"{r.tag}:charts/tf-cluster").strip() == r.tree, r
            checked.append(r.version)
    print(f"tags checked against charts/releases.yaml: {checked or 'none in this clone'}")
    assert not tags - {r.tag for r in release.releases()}, "a tf-cluster-* tag without a record entry"


def test_the_version_section_becomes_artifact_hub_changes():
    text = """## [Unreleased]

## [1.2.0] - 2026-01-02

### Added

- A new value `foo.bar`, with a long
  description on two lines.

### Fixed

- A bug.

### Upgrade notes

- Jobs restart.
"""
    (section,) = [s for s in release.changelog(text).values() if s.version == "1.2.0"]
    assert release.artifacthub_changes(section) == [
        {"kind": "added", "description": "A new value `foo.bar`, with a long description on two lines."},
        {"kind": "fixed", "description": "A bug."},
    ]


def test_the_release_before_a_version_is_found_in_the_record(tmp_path):
    (tmp_path / "charts").mkdir()
    (tmp_path / "charts" / "releases.yaml").write_text(
        "releases:\n"
        + "".join(f"  - {{version: {v}, tree: {'0' * 40}, epoch: 1}}\n" for v in ("0.10.0", "1.0.0-rc.1", "0.9.0"))
    )
    assert release.last_release(cwd=tmp_path).version == "1.0.0-rc.1"
    assert release.last_release(cwd=tmp_path, below="1.0.0-rc.1").version == "0.10.0"
    assert release.last_release(cwd=tmp_path, below="0.0.1") is None


@pytest.mark.parametrize(
    "lower,higher", [("0.2.1", "0.3.0"), ("0.9.0", "0.10.0"), ("1.0.0-rc.1", "1.0.0"), ("1.0.0-rc.2", "1.0.0-rc.10")]
)
def test_semver_order(lower, higher):
    assert release.semver(lower) < release.semver(higher)


# ----------------------------------------------------------------- version policy


def test_the_version_policy_holds_for_this_checkout():
    print(release.check_version())


def test_a_chart_change_without_a_version_bump_is_refused_and_a_bump_passes(tmp_path):
    repo = clone(tmp_path / "repo", "--no-tags")  # as CI checks out: the record, no tags
    version = release.chart_version(repo / "charts" / "tf-cluster")
    if version not in {r.version for r in release.releases(repo)}:  # released, as a maintainer would:
        changelog = repo / "charts" / "tf-cluster" / "CHANGELOG.md"  # its heading dated, then `make release`
        if not release.changelog(changelog.read_text())[version].date:
            changelog.write_text(changelog.read_text().replace(f"## [{version}]\n", f"## [{version}] - 2026-12-01\n"))
            commit(repo, "date the release")
        release.record_release(cwd=repo, tag=False)
        commit(repo, "release")
    assert "unchanged since its release" in release.check_version(cwd=repo)
    helpers = repo / "charts" / "tf-cluster" / "templates" / "_helpers.tpl"
    helpers.write_text(helpers.read_text() + "\n{{/* a change */}}\n")
    for state in ("on disk", "committed"):
        refused = rf"changed since release {version} \(charts/tf-cluster/templates/_helpers"
        with pytest.raises(UsageError, match=refused):
            release.check_version(cwd=repo)
        with pytest.raises(UsageError, match=r"(not committed|already released)"):
            release.record_release(cwd=repo, tag=False)
        if state == "on disk":
            commit(repo, "change a template")
    chart_yaml = repo / "charts" / "tf-cluster" / "Chart.yaml"
    major, minor, _ = version.split(".")
    bumped = f"{major}.{int(minor) + 1}.0"
    chart_yaml.write_text(chart_yaml.read_text().replace(f"version: {version}", f"version: {bumped}"))
    with pytest.raises(UsageError, match=rf"no section for the chart version {bumped}"):
        release.check_version(cwd=repo)  # a bump needs its release notes
    changelog = repo / "charts" / "tf-cluster" / "CHANGELOG.md"
    changelog.write_text(
        changelog.read_text().replace(
            "## [Unreleased]\n", f"## [Unreleased]\n\n## [{bumped}] - 2026-12-01\n\n### Changed\n\n- A change.\n", 1
        )
    )
    commit(repo, "bump")
    assert release.check_version(cwd=repo).startswith(f"chart {bumped} > {version}")
    entry = release.record_release(cwd=repo)
    assert release.git("rev-parse", f"{entry.tag}:charts/tf-cluster", cwd=repo).strip() == entry.tree
    assert release.last_release(cwd=repo) == entry


def test_the_previous_release_packages_from_the_record_in_a_clone_without_tags(tmp_path):
    repo = clone(tmp_path / "repo", "--no-tags")
    previous = release.last_release(cwd=repo, below=release.chart_version())
    assert previous is not None
    chart = release.export(previous, tmp_path / "old" / "tf-cluster", cwd=repo)
    assert release.chart_version(chart) == previous.version
    tgz = release.package(tmp_path / "out", chart=chart, epoch=previous.epoch)
    with tarfile.open(tgz) as tar:
        assert {m.mtime for m in tar.getmembers()} == {previous.epoch}
    print(f"\n{tgz.name} from tree {previous.tree[:12]}: sha256 {sha256(tgz)}")


# ----------------------------------------------------------------- packages


def test_two_fresh_clones_package_to_identical_bytes(tmp_path):
    """helm package stores file times; a clone's are its checkout time. Staging sets them to the
    chart's last commit time, so any clone of a commit gives the same package."""
    a, b = clone(tmp_path / "a"), clone(tmp_path / "b")
    for path in (b / "charts").rglob("*"):  # a later checkout: newer mtimes everywhere
        os.utime(path, (2_000_000_000, 2_000_000_000))
    pa, pb = package(a, tmp_path / "out-a"), package(b, tmp_path / "out-b")
    print(f"\n{pa.name} sha256 from two clones: {sha256(pa)} {sha256(pb)}")
    assert sha256(pa) == sha256(pb)
    with tarfile.open(pa) as tar:
        names = tar.getnames()
        assert "tf-cluster/LICENSE" in names and "tf-cluster/CHANGELOG.md" in names
        assert {m.mtime for m in tar.getmembers()} == {release.source_epoch(cwd=a)}
        chart = yaml.safe_load(tar.extractfile("tf-cluster/Chart.yaml").read())
    section = release.changelog((a / "charts" / "tf-cluster" / "CHANGELOG.md").read_text())[chart["version"]]
    changes = yaml.safe_load(chart["annotations"]["artifacthub.io/changes"])
    assert changes == release.artifacthub_changes(section) and changes


@pytest.mark.parametrize("major", ["4", "3"])
def test_a_signed_package_verifies_and_a_tampered_one_is_refused(tmp_path, signing_keyrings, major):
    secring, pubring = signing_keyrings
    tgz = package(ROOT, tmp_path, major, sign_key="tf-cluster test", keyring=secring)
    prov = tgz.with_name(tgz.name + ".prov")
    assert prov.is_file() and "-----BEGIN PGP SIGNATURE-----" in prov.read_text()
    h = helm.Helm(major)
    ok = h.verify(tgz, pubring)
    assert ok.returncode == 0, ok.stderr
    assert "Signed by: tf-cluster test <test@example.invalid>" in ok.stdout + ok.stderr
    data = bytearray(tgz.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one byte of the package changed after signing
    tgz.write_bytes(bytes(data))
    bad = h.verify(tgz, pubring)
    assert bad.returncode != 0 and "sha256" in (bad.stderr + bad.stdout).lower()


@pytest.mark.parametrize("major", ["4", "3"])
def test_a_signing_that_fails_leaves_no_package_to_publish(tmp_path, signing_keyrings, major):
    """`package --key NAME` with a key the keyring lacks: Helm fails after writing the .tgz; the
    unsigned package (and an older one of this version) must not stay for `publish` (issue 44)."""
    secring, _ = signing_keyrings
    out = tmp_path / "out"
    out.mkdir()
    stale = out / f"tf-cluster-{release.chart_version()}.tgz"
    stale.write_bytes(b"an earlier run's package")
    with pytest.raises(helm.HelmError):
        release.package(out, major=major, sign_key="no such key", keyring=secring)
    assert sorted(p.name for p in out.iterdir()) == [], "nothing left that publish would push"


# ----------------------------------------------------------------- what examples pin


@pytest.mark.parametrize("name", ["application.yaml", "application-oci.yaml"])
def test_the_example_applications_pin_a_released_chart_that_takes_their_values(tmp_path, name):
    """values-examples/argocd pins a chart version (a git tag `tf-cluster-<version>`, or the OCI chart's
    version): it must be a released one, and that release's chart must render the Application's own
    valuesObject (the e2e scenario swaps in this checkout's version, so only this test sees the pin)."""
    app = yaml.safe_load((ROOT / "values-examples" / "argocd" / name).read_text())
    source = app["spec"]["source"]
    version = str(source["targetRevision"]).removeprefix(release.TAG_PREFIX)
    released = {r.version: r for r in release.releases()}
    assert version in released, f"{name} pins {source['targetRevision']}: not a release ({sorted(released)})"
    chart = release.export(released[version], tmp_path / "tf-cluster")
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(source["helm"]["valuesObject"]))
    helm.Helm("4").template("mnist", helm.Values.of([values]), chart=chart)  # RenderError names what it refused
