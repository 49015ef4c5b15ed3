"""Chart releases: the version policy, the changelog, reproducible packages.

- Version policy: a chart changed since the last release tag (`tf-cluster-<version>`) must carry
  a greater SemVer version and a CHANGELOG section for it (`check_version`).
- CHANGELOG.md (Keep a Changelog) is the one source of the release notes; its section for the
  packaged version becomes the package's `artifacthub.io/changes` (`artifacthub_changes`).
- Packages are byte-reproducible: the chart is copied, every file's mtime set to one epoch
  (SOURCE_DATE_EPOCH, else the time of the last commit that touched the chart), then `helm
  package` (which stores mtimes in the tar) runs on the copy (`stage`).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml

from . import CHART, ROOT, helm
from .errors import UsageError

TAG_PREFIX = "tf-cluster-"
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


def git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout


def last_release(cwd: Path = ROOT, below: str | None = None) -> tuple[str, str] | None:
    """(tag, version) of the highest `tf-cluster-<semver>` tag (lower than `below`, if given), or None."""
    tags = [t for t in git("tag", "--list", f"{TAG_PREFIX}*", cwd=cwd).split() if SEMVER.match(t[len(TAG_PREFIX) :])]
    if below:
        tags = [t for t in tags if semver(t[len(TAG_PREFIX) :]) < semver(below)]
    if not tags:
        return None
    tag = max(tags, key=lambda t: semver(t[len(TAG_PREFIX) :]))
    return tag, tag[len(TAG_PREFIX) :]


def check_version(cwd: Path = ROOT) -> str:
    """What `ct lint --check-version-increment` checks, plus the changelog: a chart changed since
    the last release tag has a greater version and a CHANGELOG section for it. Returns a line
    saying what was checked; raises UsageError naming what to do."""
    chart = cwd / CHART.relative_to(ROOT)
    version = chart_version(chart)
    semver(version)
    sections = changelog((chart / "CHANGELOG.md").read_text())
    if version not in sections:
        raise UsageError(
            f"charts/tf-cluster/CHANGELOG.md has no section for the chart version {version}: add "
            f"'## [{version}] - YYYY-MM-DD' with what changed (Added/Changed/Fixed ..., Upgrade notes)"
        )
    last = last_release(cwd)
    if last is None:
        return f"chart {version}: no release tag yet (tags are {TAG_PREFIX}<version>)"
    tag, released = last
    changed = git("diff", "--name-only", tag, "--", str(chart.relative_to(cwd)), cwd=cwd).split()
    changed += [
        f
        for f in git("ls-files", "--others", "--exclude-standard", "--", str(chart.relative_to(cwd)), cwd=cwd).split()
        if f not in changed
    ]
    if not changed:
        return f"chart {version}: unchanged since {tag}"
    if semver(version) <= semver(released):
        shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
        raise UsageError(
            f"the chart changed since {tag} ({shown}) but charts/tf-cluster/Chart.yaml still says version "
            f"{version}: bump it above {released} (SemVer: a values-breaking change is a major bump, a "
            "new value a minor one, a fix a patch) and describe it in CHANGELOG.md"
        )
    return f"chart {version} > {released} ({tag}); {len(changed)} file(s) changed since"


# ----------------------------------------------------------------- packages


def source_epoch(cwd: Path = ROOT) -> int:
    """SOURCE_DATE_EPOCH, else the commit time of the last commit that touched the chart in `cwd`."""
    if os.environ.get("SOURCE_DATE_EPOCH"):
        return int(os.environ["SOURCE_DATE_EPOCH"])
    try:
        out = git("log", "-1", "--format=%ct", "--", str(CHART.relative_to(ROOT)), cwd=cwd).strip()
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
    repo: Path = ROOT,
    major: str = "4",
    sign_key: str | None = None,
    keyring: Path | None = None,
    passphrase_file: Path | None = None,
) -> Path:
    """The chart of `repo` (a checkout) as a reproducible package in `out`; signed with `sign_key`
    from `keyring` when given (a .prov beside it). Returns the .tgz."""
    chart = repo / CHART.relative_to(ROOT)
    staged = stage(out / ".staged" / "tf-cluster", source_epoch(cwd=repo), chart=chart)
    helm.Helm(major).package(
        out.resolve(), chart=staged, sign_key=sign_key, keyring=keyring, passphrase_file=passphrase_file
    )
    shutil.rmtree(out / ".staged")
    return out / f"tf-cluster-{chart_version(chart)}.tgz"
