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


def clone(dest):
    subprocess.run(["git", "clone", "-q", str(ROOT), str(dest)], check=True)
    for k, v in (("user.email", "test@example.invalid"), ("user.name", "test")):
        subprocess.run(["git", "-C", str(dest), "config", k, v], check=True)
    return dest


def commit(repo, message):
    subprocess.run(["git", "-C", str(repo), "commit", "-qam", message], check=True)


def package(repo, out, major="4", **sign) -> Path:
    return release.package(out, repo=repo, major=major, **sign)


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ----------------------------------------------------------------- changelog


def test_every_release_tag_and_the_chart_version_have_a_changelog_section():
    sections = release.changelog((CHART / "CHANGELOG.md").read_text())
    tags = subprocess.run(["git", "-C", str(ROOT), "tag", "--list", "tf-cluster-*"], capture_output=True, text=True)
    versions = [t.removeprefix("tf-cluster-") for t in tags.stdout.split()]
    assert versions, "no release tags in this clone (git clone copies them; a shallow fetch may not)"
    for v in [*versions, release.chart_version()]:
        assert v in sections and sections[v].date, f"CHANGELOG.md has no dated section for {v}"


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


def test_the_release_before_a_version_is_found_by_its_tag(tmp_path):
    repo = clone(tmp_path / "repo")
    for v in ("0.9.0", "0.10.0", "1.0.0-rc.1"):
        subprocess.run(["git", "-C", str(repo), "tag", f"tf-cluster-{v}"], check=True)
    assert release.last_release(cwd=repo) == ("tf-cluster-1.0.0-rc.1", "1.0.0-rc.1")
    assert release.last_release(cwd=repo, below="1.0.0-rc.1") == ("tf-cluster-0.10.0", "0.10.0")
    assert release.last_release(cwd=repo, below="0.0.1") is None


@pytest.mark.parametrize(
    "lower,higher", [("0.2.1", "0.3.0"), ("0.9.0", "0.10.0"), ("1.0.0-rc.1", "1.0.0"), ("1.0.0-rc.2", "1.0.0-rc.10")]
)
def test_semver_order(lower, higher):
    assert release.semver(lower) < release.semver(higher)


# ----------------------------------------------------------------- version policy


def test_the_version_policy_holds_for_this_checkout():
    print(release.check_version())


def test_a_chart_change_without_a_version_bump_is_refused_and_a_bump_passes(tmp_path):
    repo = clone(tmp_path / "repo")
    subprocess.run(["git", "-C", str(repo), "tag", f"tf-cluster-{release.chart_version()}"], check=False)
    assert "unchanged since" in release.check_version(cwd=repo)
    helpers = repo / "charts" / "tf-cluster" / "templates" / "_helpers.tpl"
    helpers.write_text(helpers.read_text() + "\n{{/* a change */}}\n")
    commit(repo, "change a template")
    version = release.chart_version(repo / "charts" / "tf-cluster")
    with pytest.raises(UsageError, match=rf"changed since tf-cluster-{version} \(charts/tf-cluster/templates/_helpers"):
        release.check_version(cwd=repo)
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
