"""No package registry's host name is written in the repository.

Everything the project fetches goes through the package client the machine has configured (pip,
npm's `npm pack`, apt's sources via `apt-get indextargets`, Go's GOPROXY), so a user's mirror is
honoured. A host written here would bypass it. The names are assembled from parts so that this file
does not hold them either.
"""

from __future__ import annotations

import subprocess

from tf_cluster import ROOT

HOSTS = [
    ".".join(parts)
    for parts in (
        ("pypi", "org"),
        ("files", "pythonhosted", "org"),
        ("registry", "npmjs", "org"),
        ("registry", "yarnpkg", "com"),
        ("deb", "debian", "org"),
        ("security", "debian", "org"),
        ("snapshot", "debian", "org"),
        ("proxy", "golang", "org"),
        ("sum", "golang", "org"),
        ("repo1", "maven", "org"),
        ("repo", "maven", "apache", "org"),
        ("index", "crates", "io"),
        ("static", "crates", "io"),
    )
]


def hosts_named_in(repo) -> str:
    """`git grep`'s lines naming a registry host in the repository at `repo` ('' when none)."""
    found = subprocess.run(
        ["git", "grep", "-n", "-i", "-F", *(arg for host in HOSTS for arg in ("-e", host))],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    assert found.returncode in (0, 1), found.stderr  # 1: nothing found
    return found.stdout


def test_no_file_of_the_repository_names_a_package_registry_host():
    found = hosts_named_in(ROOT)
    assert found == "", (
        "package registry hosts written in the repository (fetch through the machine's package "
        "client instead, so that a mirror is honoured):\n" + found
    )


def test_the_check_finds_a_host_when_one_is_written(tmp_path):
    """The grep above is the one that finds a host: shown on a scratch repository holding one."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "fetch.sh").write_text(f"curl https://{HOSTS[2]}/left-pad\n")
    subprocess.run(["git", "-C", str(tmp_path), "add", "fetch.sh"], check=True)
    assert hosts_named_in(tmp_path).startswith("fetch.sh:1:")
