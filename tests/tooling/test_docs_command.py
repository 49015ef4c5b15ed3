"""`tf-cluster docs`: the user guide from the command itself, so that every hint it prints works
without a checkout (issue 42: installed texts pointed into docs/ of a repository the user does not
have). The installed wheel's copy is read in tests/local/test_installed.py."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tf_cluster import ROOT
from tf_cluster.commands import docs
from tf_cluster.errors import UsageError

SOURCES = sorted((ROOT / "tooling" / "tf_cluster").rglob("*.py"))


def tf_cluster(*argv) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tf_cluster.cli", *argv], capture_output=True, text=True, timeout=60, cwd=ROOT
    )


def test_the_listing_names_every_page_of_the_guide_with_its_title():
    r = tf_cluster("docs")
    assert r.returncode == 0, r.stderr
    for section in docs.SECTIONS:
        for page in (ROOT / "docs" / section).glob("*.md"):
            heading = next(ln[2:] for ln in docs.read(page).splitlines() if ln.startswith("# "))
            assert re.search(rf"^  {section}/{page.stem} +{re.escape(heading.strip())}$", r.stdout, re.M), page
    assert "development/" not in r.stdout  # the repository's own pages are not the user's


@pytest.mark.parametrize(
    "name", ["storage", "user-guide/storage", "docs/user-guide/storage.md", "user-guide/storage.md"]
)
def test_a_page_is_printed_by_its_name_or_its_path(name):
    r = tf_cluster("docs", name)
    assert r.returncode == 0, r.stderr
    assert r.stdout == (ROOT / "docs" / "user-guide" / "storage.md").read_text()


@pytest.mark.parametrize(
    ("name", "said"),
    [("values", "names several pages: user-guide/values, reference/values"), ("nope", "no page 'nope'")],
)
def test_an_unknown_or_ambiguous_name_is_a_usage_error_naming_the_pages(name, said):
    r = tf_cluster("docs", name)
    assert r.returncode == 2
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert lines[0].startswith("tf-cluster docs: error: ") and said in lines[0], lines[0]


def test_the_values_reference_is_the_charts_readme_it_includes():
    r = tf_cluster("docs", "reference/values")
    assert r.returncode == 0, r.stderr
    assert (ROOT / "charts" / "tf-cluster" / "README.md").read_text() in r.stdout
    assert "--8<--" not in r.stdout
    for page in docs.pages().values():  # no include left unexpanded in any page
        assert "--8<--" not in docs.read(page), page


def strings(path: Path) -> list[str]:
    """The string literals of a module that are not docstrings (what it can print)."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings
    ]


def test_no_text_of_the_command_points_into_a_checkouts_docs():
    found = [(p.name, s) for p in SOURCES for s in strings(p) if re.search(r"docs/[\w./-]+\.md", s)]
    assert found == [], "name the page as `tf-cluster docs NAME` instead"


def test_every_page_a_text_of_the_command_names_exists():
    named = {m for p in SOURCES for s in strings(p) for m in re.findall(r"tf-cluster docs ([a-z][\w/-]*)", s)}
    assert {"storage", "exit-codes", "tuning"} <= named  # the hints this test was written for
    for name in named:
        try:
            docs.find(name)
        except UsageError as e:
            pytest.fail(f"a text names `tf-cluster docs {name}`: {e}")
