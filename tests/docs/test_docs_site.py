"""The docs site builds with `mkdocs build --strict` (what `make site` runs), and the strict build
can fail: a link to a missing page or anchor, a page left out of the nav, a missing snippet each
stop it, naming what is broken. MkDocs runs from its own pinned virtualenv, .venv-docs/
(tests/docs_site.py)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import docs_site
import pytest
import yaml

ROOT = docs_site.ROOT


@pytest.fixture(scope="module")
def mkdocs() -> Path:
    try:
        return docs_site.mkdocs()
    except docs_site.DocsSiteError as e:
        pytest.fail(f"the docs' virtualenv (.venv-docs/ from docs/requirements.txt): {e}")


@pytest.fixture(scope="module")
def built(mkdocs, tmp_path_factory):
    """The repository's site, built once: (mkdocs' result, the site's folder)."""
    site = tmp_path_factory.mktemp("docs") / "site"
    return docs_site.build(site, exe=mkdocs), site


def test_the_docs_site_builds_strictly(built):
    proc, site = built
    assert proc.returncode == 0, "`make site` fails:\n" + proc.stdout + proc.stderr
    assert (site / "index.html").is_file()


def test_the_values_reference_page_includes_the_generated_chart_readme(built):
    """Included at build time, never copied: a value's row of the chart's README is on the page."""
    _, site = built
    page = (site / "reference" / "values" / "index.html").read_text()
    assert "resourceDefaults.training.cpu" in page
    assert "--8&lt;--" not in page and "--8<--" not in page


LINK = re.compile(r"\]\(([^)\s]+)\)")


def page_html(site: Path, page: Path) -> Path:
    """Where the site puts docs/<page>.md (directory URLs: docs/a/b.md -> a/b/index.html)."""
    rel = page.relative_to(ROOT / "docs").with_suffix("")
    return site / ("index.html" if rel.name == "index" and rel.parent == Path(".") else rel / "index.html")


@pytest.mark.parametrize("doc", ["README.md", "CONTRIBUTING.md"])
def test_the_readme_and_contributing_link_to_files_and_anchors_that_exist(built, doc):
    """They live outside the site (GitHub shows them), so mkdocs does not check them: their
    relative links must name existing files, and an anchor must be on the built page."""
    _, site = built
    broken = []
    for target in LINK.findall((ROOT / doc).read_text()):
        if "://" in target:
            continue
        path, _, anchor = target.partition("#")
        file = (ROOT / path).resolve()
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and not (file.is_relative_to(ROOT / "docs") and file.suffix == ".md"):
            broken.append(f"{target}: an anchor outside the docs site cannot be checked")
        elif anchor and f'id="{anchor}"' not in page_html(site, file).read_text():
            broken.append(f"{target}: no such anchor on the built page")
    assert broken == []


BROKEN = {
    # case: (the page's text, in the nav?, what the failure message must name)
    "a link to a missing page": ("See [setup](user-guide/no-such-page.md).", True, "no-such-page.md"),
    "a link to a missing anchor": ("See [the bound](user-guide/lost-nodes.md#no-such-anchor).", True, "no-such-anchor"),
    "a page left out of the nav": ("Nobody links here.", False, "broken.md"),
    "a missing snippet": ('--8<-- "charts/tf-cluster/NO-SUCH-README.md"', True, "NO-SUCH-README.md"),
}


@pytest.mark.parametrize("case", BROKEN)
def test_a_broken_page_fails_the_strict_build_and_is_named(mkdocs, tmp_path, case):
    text, in_nav, named = BROKEN[case]
    project = tmp_path / "project"
    shutil.copytree(ROOT / "docs", project / "docs")
    (project / "charts" / "tf-cluster").mkdir(parents=True)
    shutil.copy(ROOT / "charts" / "tf-cluster" / "README.md", project / "charts" / "tf-cluster" / "README.md")
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    if in_nav:
        config["nav"].append({"Broken": "broken.md"})
    (project / "mkdocs.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    (project / "docs" / "broken.md").write_text(f"# Broken\n\n{text}\n")

    proc = docs_site.build(project / "site", project=project, exe=mkdocs)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, f"{case}: the strict build passed:\n{output}"
    assert named in output, f"{case}: the failure does not name {named!r}:\n{output}"
