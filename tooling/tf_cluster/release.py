"""Chart releases: the version policy, the changelog, reproducible packages.

- Version policy: a chart that differs from the last release (recorded in charts/releases.yaml:
  version, chart tree, package time; tagged `tf-cluster-<version>`) must carry a greater SemVer
  version and a CHANGELOG section for it (`check_version`).
- CHANGELOG.md (Keep a Changelog) is the one source of the release notes; its section for the
  packaged version becomes the package's `artifacthub.io/changes` (`artifacthub_changes`).
- Packages are byte-reproducible: the chart is copied, every file's mtime set to one epoch
  (SOURCE_DATE_EPOCH, else the time of the last commit that touched the chart), then `helm
  package` (which stores mtimes in the tar) runs on the copy (`stage`).
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from . import CHART, ROOT, helm
from .errors import UsageError

TAG_PREFIX = "tf-cluster-"
RELEASES = ROOT / "charts" / "releases.yaml"  # the record of released versions
CHART_PATH = "charts/tf-cluster"  # the chart in the repository (release verbs work on a checkout)
KINDS = {"Added": "added", "Changed": "changed", "Deprecated": "deprecated", "Removed": "removed"}
KINDS |= {"Fixed": "fixed", "Security": "security"}  # Artifact Hub's kinds; other headings stay out
SEMVER = re.compile(r"^(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$")


def semver(version: str) -> tuple:
    """A sortable key: 1.2.3 > 1.2.3-rc.1 > 1.2.2."""
    m = SEMVER.match(version)
    if not m:
        raise UsageError(f"version {version!r} is not SemVer (MAJOR.MINOR.PATCH[-PRERELEASE])")
    major, minor, patch, pre = m.groups()
    pre_key = (1,) if pre is None else (0, *((0, int(p)) if p.isdigit() else (1, p) for p in pre.split(".")))
    return (int(major), int(minor), int(patch), pre_key)


def chart_version(chart: Path = CHART) -> str:
    return str(yaml.safe_load((chart / "Chart.yaml").read_text())["version"])


# ----------------------------------------------------------------- changelog


@dataclass
class Section:
    version: str
    date: str
    items: dict[str, list[str]]  # heading (Added, Fixed, Upgrade notes ...) -> entries, one line each


def changelog(text: str) -> dict[str, Section]:
    """The sections of a Keep a Changelog file, by version (`Unreleased` included)."""
    sections: dict[str, Section] = {}
    current: Section | None = None
    heading = ""
    for line in text.splitlines():
        m = re.match(r"^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?\s*$", line)
        if m:
            current = sections[m.group(1)] = Section(m.group(1), m.group(2) or "", {})
            heading = ""
            continue
        if current is None:
            continue
        if line.startswith("### "):
            heading = line[4:].strip()
            current.items[heading] = []
        elif line.startswith("- ") and heading:
            current.items[heading].append(line[2:].strip())
        elif line.startswith("  ") and heading and current.items[heading]:  # an entry's continuation
            current.items[heading][-1] += " " + line.strip()
    return sections


def artifacthub_changes(section: Section) -> list[dict[str, str]]:
    """Artifact Hub's `artifacthub.io/changes`: [{kind, description}], Markdown links and code kept."""
    return [
        {"kind": KINDS[heading], "description": entry}
        for heading, entries in section.items.items()
        if heading in KINDS
        for entry in entries
    ]


# ----------------------------------------------------------------- version policy


def git(*args: str, cwd: Path = ROOT, env: dict | None = None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True, env=env).stdout


@dataclass(frozen=True)
class Release:
    """A released version as `charts/releases.yaml` records it."""

    version: str
    tree: str  # git tree of charts/tf-cluster at the release
    epoch: int  # the file time of its package (SOURCE_DATE_EPOCH)

    @property
    def tag(self) -> str:
        return TAG_PREFIX + self.version


def releases(cwd: Path = ROOT) -> list[Release]:
    """The released versions recorded in `charts/releases.yaml`, lowest first."""
    path = cwd / RELEASES.relative_to(ROOT)
    data = yaml.safe_load(path.read_text()) if path.exists() else None
    found = [Release(str(r["version"]), str(r["tree"]), int(r["epoch"])) for r in (data or {}).get("releases") or []]
    return sorted(found, key=lambda r: semver(r.version))


def last_release(cwd: Path = ROOT, below: str | None = None) -> Release | None:
    """The highest recorded release (lower than `below`, if given), or None."""
    found = [r for r in releases(cwd) if below is None or semver(r.version) < semver(below)]
    return found[-1] if found else None


def chart_tree(cwd: Path = ROOT) -> str:
    """The git tree of the chart directory as it is on disk (uncommitted and untracked files
    included, ignored ones not): written through a scratch index, the checkout's own untouched."""
    rel = CHART_PATH
    with tempfile.TemporaryDirectory() as scratch:
        env = {**os.environ, "GIT_INDEX_FILE": str(Path(scratch) / "index")}
        git("add", "--all", "--", rel, cwd=cwd, env=env)
        return git("write-tree", f"--prefix={rel}/", cwd=cwd, env=env).strip()


def changed_files(old_tree: str, new_tree: str, cwd: Path = ROOT) -> list[str]:
    """Files that differ between two chart trees (empty when git lacks the old one: a shallow clone)."""
    try:
        names = git("diff", "--name-only", old_tree, new_tree, cwd=cwd).split()
    except subprocess.CalledProcessError:
        return []
    return [f"{CHART_PATH}/{n}" for n in names]


def check_version(cwd: Path = ROOT) -> str:
    """What `ct lint --check-version-increment` checks, plus the changelog: a chart that is not
    exactly a released version's has a version above the last release and a CHANGELOG section
    for it. Returns a line saying what was checked; raises UsageError naming what to do."""
    chart = cwd / CHART_PATH
    version = chart_version(chart)
    semver(version)
    sections = changelog((chart / "CHANGELOG.md").read_text())
    if version not in sections:
        raise UsageError(
            f"charts/tf-cluster/CHANGELOG.md has no section for the chart version {version}: add "
            f"'## [{version}] - YYYY-MM-DD' with what changed (Added/Changed/Fixed ..., Upgrade notes)"
        )
    recorded = {r.version: r for r in releases(cwd)}
    last = last_release(cwd)
    if last is None:
        return f"chart {version}: no release recorded yet (charts/releases.yaml)"
    tree = chart_tree(cwd)
    same = recorded.get(version)
    if same is not None and same.tree == tree:
        return f"chart {version}: unchanged since its release (tree {tree[:12]})"
    if same is not None or semver(version) <= semver(last.version):
        base = same or last
        changed = changed_files(base.tree, tree, cwd)
        shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
        raise UsageError(
            f"the chart changed since release {base.version} ({shown or f'tree {base.tree[:12]} -> {tree[:12]}'}) but "
            f"charts/tf-cluster/Chart.yaml still says version {version}: bump it above {last.version} (SemVer: a "
            "values-breaking change is a major bump, a new value a minor one, a fix a patch) and describe it in "
            "CHANGELOG.md"
        )
    changed = changed_files(last.tree, tree, cwd)
    return f"chart {version} > {last.version} (the last release); {len(changed)} file(s) changed since"


def record_release(cwd: Path = ROOT, tag: bool = True) -> Release:
    """Record the chart version at HEAD as released (`tf-cluster release`): its committed chart
    tree and package time appended to charts/releases.yaml, and a tag `tf-cluster-<version>`."""
    rel = CHART_PATH
    version = chart_version(cwd / rel)
    tree = chart_tree(cwd)
    head = git("rev-parse", f"HEAD:{rel}", cwd=cwd).strip()
    if tree != head:
        raise UsageError(f"{rel} has changes that are not committed: commit them, then release")
    if version in {r.version for r in releases(cwd)}:
        raise UsageError(f"version {version} is already released (charts/releases.yaml): bump Chart.yaml")
    print(check_version(cwd))
    if not changelog((cwd / rel / "CHANGELOG.md").read_text())[version].date:
        raise UsageError(f"CHANGELOG.md's section [{version}] has no date: '## [{version}] - YYYY-MM-DD'")
    entry = Release(version, tree, source_epoch(cwd))
    path = cwd / RELEASES.relative_to(ROOT)
    with path.open("a") as f:
        f.write(f"  - {{version: {entry.version}, tree: {entry.tree}, epoch: {entry.epoch}}}\n")
    if tag:
        git("tag", entry.tag, cwd=cwd)
    return entry


def export(rel: Release, dest: Path, cwd: Path = ROOT) -> Path:
    """The chart directory of a released version, from git's objects (no tag needed)."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    try:
        archive = subprocess.run(["git", "archive", rel.tree], cwd=cwd, capture_output=True, check=True).stdout
    except subprocess.CalledProcessError as e:
        raise UsageError(
            f"release {rel.version}: git has no tree {rel.tree} here ({e.stderr.decode().strip()}): "
            "a shallow clone? `git fetch --unshallow`"
        ) from None
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    return dest


# ----------------------------------------------------------------- packages


def source_epoch(cwd: Path = ROOT) -> int:
    """SOURCE_DATE_EPOCH, else the commit time of the last commit that touched the chart in `cwd`."""
    if os.environ.get("SOURCE_DATE_EPOCH"):
        return int(os.environ["SOURCE_DATE_EPOCH"])
    try:
        out = git("log", "-1", "--format=%ct", "--", CHART_PATH, cwd=cwd).strip()
    except (OSError, subprocess.CalledProcessError):
        out = ""
    if not out:
        raise UsageError("no git history to date the package: set SOURCE_DATE_EPOCH (seconds since 1970)")
    return int(out)


def stage(dest: Path, epoch: int, chart: Path = CHART) -> Path:
    """A copy of the chart ready for `helm package`: `artifacthub.io/changes` from the changelog
    section of its version (when it has one), every mtime `epoch`. Returns the copy's path."""
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(chart, dest, ignore=shutil.ignore_patterns("__pycache__"))
    version = chart_version(dest)
    changelog_file = dest / "CHANGELOG.md"
    # A version released before this changelog form (e.g. 0.2.1, packaged again from its tag) has
    # no section to turn into annotations; `check_version` requires one for every new version.
    section = changelog(changelog_file.read_text()).get(version) if changelog_file.exists() else None
    if section is not None:
        changes = yaml.safe_dump(artifacthub_changes(section), sort_keys=False, width=1000).rstrip("\n")
        chart_yaml = dest / "Chart.yaml"
        text = chart_yaml.read_text()
        if "\nannotations:\n" not in text:
            raise UsageError("Chart.yaml has no annotations: block to add artifacthub.io/changes to")
        block = "  artifacthub.io/changes: |\n" + "".join(f"    {ln}\n" for ln in changes.splitlines())
        chart_yaml.write_text(text.replace("\nannotations:\n", "\nannotations:\n" + block, 1))
    for path in [dest, *dest.rglob("*")]:
        os.utime(path, (epoch, epoch), follow_symlinks=False)
    return dest


def package(
    out: Path,
    *,
    chart: Path = CHART,
    epoch: int | None = None,
    major: str = "4",
    sign_key: str | None = None,
    keyring: Path | None = None,
    passphrase_file: Path | None = None,
) -> Path:
    """`chart` (default: this checkout's) as a reproducible package in `out`, its files dated
    `epoch` (default: `source_epoch` of the checkout holding it); signed with `sign_key` from
    `keyring` when given (a .prov beside it). Returns the .tgz."""
    if epoch is None:
        epoch = source_epoch(cwd=chart.parent.parent)
    tgz = out / f"tf-cluster-{chart_version(chart)}.tgz"
    prov = tgz.with_name(tgz.name + ".prov")
    for old in (tgz, prov):  # a package of this version left by an earlier run is not this one
        old.unlink(missing_ok=True)
    staged = stage(out / ".staged" / "tf-cluster", epoch, chart=chart)
    try:
        helm.Helm(major).package(
            out.resolve(), chart=staged, sign_key=sign_key, keyring=keyring, passphrase_file=passphrase_file
        )
    except BaseException:  # a failed signing leaves no unsigned package that `publish` would push
        for made in (tgz, prov):
            made.unlink(missing_ok=True)
        raise
    finally:
        shutil.rmtree(out / ".staged", ignore_errors=True)
    return tgz
