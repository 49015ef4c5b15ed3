"""`tf-cluster docs`: the user guide this command carries, readable without a checkout or a network.

    tf-cluster docs                 # the pages, each with its title
    tf-cluster docs storage         # one page (Markdown), by name: `user-guide/storage` or just `storage`
    tf-cluster docs storage | less

The command's own hints name pages this way (`tf-cluster docs lost-nodes`), so that what it prints
works where it is installed. An installed tf-cluster (pipx, uv tool, pip) carries the pages as package
data; a checkout reads docs/.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from .. import CHART, DOCS
from ..errors import UsageError
from . import Subparsers

#: the docs' folders a user reads (the development pages are the repository's)
SECTIONS = ("user-guide", "operator-guide", "reference")


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "docs",
        help="read the user guide: the pages, or one page by name (tf-cluster docs storage)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("page", nargs="?", help="a page's name, e.g. storage or reference/exit-codes")
    p.set_defaults(func=run)


def pages(root: Path = DOCS) -> dict[str, Path]:
    """name (`user-guide/storage`) -> file, for every page of SECTIONS."""
    found = {}
    for section in SECTIONS:
        for f in sorted((root / section).glob("*.md")):
            found[f"{section}/{f.stem}"] = f
    return found


def read(page: Path) -> str:
    """A page's text, with what it includes at build time (pymdownx.snippets: `--8<-- "PATH"`, from
    the repository's root; the chart's files from the chart this command carries) in its place."""
    out = []
    for line in page.read_text().splitlines(keepends=True):
        m = re.fullmatch(r'--8<-- "charts/tf-cluster/([^"]+)"\s*', line)
        out.append((CHART / m.group(1)).read_text() if m else line)
    return "".join(out)


def title(page: Path) -> str:
    for line in read(page).splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return page.stem


def find(name: str, root: Path = DOCS) -> Path:
    """The page called `name`: its full name, else the one page whose file name or full name it
    matches. No page, or several, is a usage error that lists what there is."""
    known = pages(root)
    key = name.strip().strip("/").removesuffix(".md").removeprefix("docs/")
    if key in known:
        return known[key]
    matches = [n for n in known if n.rsplit("/", 1)[1] == key] or [n for n in known if key and key in n]
    if len(matches) == 1:
        return known[matches[0]]
    if matches:
        raise UsageError(f"{name!r} names several pages: {', '.join(matches)}; give one of them")
    raise UsageError(f"no page {name!r}; the pages: {', '.join(known)} (`tf-cluster docs` lists them)")


def run(args: argparse.Namespace) -> int:
    if args.page:
        print(read(find(args.page)), end="")
        return 0
    known = pages()
    width = max(map(len, known))
    for name, f in known.items():
        print(f"  {name:{width}}  {title(f)}")
    print("\nread one: tf-cluster docs NAME (the part after the slash is enough when it is unique)")
    return 0
