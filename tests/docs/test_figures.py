"""One source for every figure: what `make bench` measures, tests/bench/report.py writes into
docs/benchmarks.md, and a hand-written page links the section instead of repeating it (a copy goes
stale, or contradicts the table, the day `make bench` runs again).

The figures are read from the generated page's tables: each number with its unit (from the cell,
"1.66x", "93.0%", "+2.2 s", else from the column's header, "render s", "etcd MB", else UNITS),
except what a run was given (GIVEN columns, "2 of 4" counts, a window in parentheses). A page
repeats one when it writes a number with the same unit that rounds from it:

- anywhere, with 3 significant digits or more ("213 s", "1.82 GB", "1,829 MB", "30.2 s");
- with a decimal point ("5.5 s", "2.0x"), in a paragraph, list item or table row that links to
  docs/benchmarks.md, where it can only be a copy of the table it links. Elsewhere a figure that
  coarse matches one of the page's hundreds of numbers by chance (quick-start.md's "3.4 s", a fresh
  install's Helm render, rounds from a simulated start's 3.44 s).

Code (fenced blocks, `spans`) quotes commands, values and output, no measured figure, and is
skipped.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from tf_cluster import ROOT

MEASURED = ROOT / "docs" / "benchmarks.md"
# Pages a script writes (the numbers there are its own): no hand-written figure to check
GENERATED = {
    "docs/benchmarks.md": "tests/bench/report.py",
    "docs/test-tiers.md": "tests/tiers.py",
    "docs/development/e2e-soak.md": "tests/soak.py",
}
# The hand-written Markdown (the chart README too: helm-docs writes it from values.yaml's
# hand-written comments). Not the chart's CHANGELOG.md: an entry records what its version measured
# when it was made, history that the next `make bench` must not rewrite.
PAGES = ("*.md", "docs/**/*.md", "charts/*/README.md", "tests/README.md", "tooling/**/README.md")

# Columns whose numbers are what a run was given, not what it measured
GIVEN = {"tasks", "tasks N", "sampled", "update period s"}
# A column's unit from its header, first match wins ("/s" before "s")
HEADER_UNITS = (
    (r"\bGB\b", "GB"),
    (r"\bMB\b", "MB"),
    (r"\bKB\b", "KB"),
    (r"\bbytes\b", "bytes"),
    (r"%", "%"),
    (r"/s\b", "/s"),
    (r"\bs\b|\(s\)|\bseconds\b", "s"),
)
# ... and of the columns whose header names none: the stages and floors are seconds (their
# section's text says so), the rest rates and counts no page quotes with a unit below
UNITS = {
    **dict.fromkeys(
        (
            "install returned",
            "scheduled",
            "container running",
            "peers resolved",
            "program started",
            "TF imported",
            "strategy built",
            "first step",
            "floor: 1 pod",
            "floor: same pods",
            "min",
            "max",
        ),
        "s",
    ),
    **dict.fromkeys(("chart threads", "TF defaults", "TF sized for 16 cores"), "steps/s"),
    **dict.fromkeys(("objects", "TFJob objects"), "objects"),
    "most tasks": "tasks",
    "API requests": "requests",
    "EndpointSlices": "EndpointSlices",
    "nodes not Ready": "nodes",
    "API req/task": "requests/task",
    "DNS queries/task": "queries/task",
    "(c) API req/task/min": "requests/task/min",
    "by verb /task/min": "requests/task/min",
    "watch renewals": "watches",
    "DNS queries/task/min": "queries/task/min",
    "(d) API req/fencer": "requests/task",
    "API req/other task": "requests/task",
    "beside": "parts",
    "most peers one task waited for": "peers",
    "Event requests/task": "requests/task",
    "bound/task": "requests/task",
    "Event objects/task": "objects/task",
    "moments/task": "moments/task",
    "Events by reason": "Events",
}

NUMBER = r"\d+(?:,\d{3})*(?:\.\d+)?"
# in a generated cell: a number and the unit written beside it, if any ("254fea0" is no number)
CELL_FIGURE = re.compile(rf"(?<![\w.])[+-]?({NUMBER})(?:(x|%)|\s(s|GB|MB|KB)\b)?(?![\w.])")
# in a page: a number or a range ("5.9-7.3 s") and its unit
PAGE_FIGURE = re.compile(
    rf"(?<![\w.,])({NUMBER})(?:\s?[-–]\s?({NUMBER}))?"
    r"(?:(x|%)|\s?(s|seconds|GB|MB|KB)\b|\s(bytes|(?:[A-Za-z]+\s)?(?:objects|requests)\b))(?!\w)"
)
LINK = re.compile(r"\]\(([^)#\s]+)#?([^)\s]*)\)")
BLOCK_START = re.compile(r"^\s*(?:[-*+]\s|\d+\.\s|\||#)")


@dataclass(frozen=True)
class Figure:
    value: float
    unit: str
    line: int  # of docs/benchmarks.md
    column: str
    section: str

    def anchor(self) -> str:
        """The section's anchor, as MkDocs makes it from the heading."""
        return re.sub(r"\s+", "-", re.sub(r"[^\w\s-]", "", self.section.lower()).strip())


def column_unit(header: str) -> str | None:
    for pattern, unit in HEADER_UNITS:
        if re.search(pattern, header):
            return unit
    return UNITS.get(header)


def cell_figures(cell: str) -> list[tuple[float, str | None]]:
    """The measured numbers of one cell, each with the unit written beside it: not the counts of
    "2 of 4", not what parentheses add ("(45 s from +30 s)": the window), but a ratio in them does."""
    if re.fullmatch(r"\d+ of \d+", cell):
        return []
    cell = re.sub(r"\((?![\d.]+x\))[^)]*\)", "", cell)
    return [(float(m[1].replace(",", "")), m[2] or m[3]) for m in CELL_FIGURE.finditer(cell)]


def measured(text: str) -> tuple[list[Figure], list[str]]:
    """The figures in the tables of the generated page, and its numeric columns of no known unit."""
    figures, unknown = [], []
    section, header = "", None
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith("#"):
            section = line.lstrip("#").strip()
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
            continue
        if set(line) <= set("|-: "):
            continue
        for column, cell in zip(header[1:], cells[1:], strict=True):  # the first column names the row
            if column in GIVEN:
                continue
            for value, unit in cell_figures(cell):
                unit = unit or column_unit(column)
                if unit is None:
                    unknown.append(f"{section}: {column!r}")
                else:
                    figures.append(Figure(value, unit, n, column, section))
    return figures, sorted(set(unknown))


def prose(text: str) -> list[str]:
    """The page's lines with code blanked out (fenced blocks, `spans`), numbered as in the file."""
    lines, fence = [], None
    for line in text.splitlines():
        mark = re.match(r"\s*(```|~~~)", line)
        if fence:
            fence = None if mark and mark[1] == fence else fence
            lines.append("")
        elif mark:
            fence = mark[1]
            lines.append("")
        else:
            lines.append(re.sub(r"`[^`]*`", "``", line))
    return lines


def blocks(lines: list[str]) -> list[list[int]]:
    """The line indexes of each paragraph, list item, table row and heading."""
    out: list[list[int]] = []
    for i, line in enumerate(lines):
        if not line.strip():
            out.append([])
        elif BLOCK_START.match(line) or not out:
            out.append([i])
        else:
            out[-1].append(i)
    return [b for b in out if b]


def significant(number: str) -> int:
    return len(number.replace(",", "").replace(".", "").lstrip("0"))


@dataclass(frozen=True)
class Repeat:
    """A figure of the generated page that a page repeats: its line, what it writes there, and what
    it repeats (with the link to write instead)."""

    line: int
    text: str
    says: str

    def __str__(self) -> str:
        return f"{self.line}: {self.text!r} {self.says}"


def repeats(text: str, page: Path, figures: list[Figure]) -> list[Repeat]:
    """Where the page repeats a figure of the generated page: the figure of a section its paragraph
    links to first, else the nearest."""
    lines = prose(text)
    found: list[Repeat] = []
    for block in blocks(lines):
        linked = {
            anchor
            for i in block
            for target, anchor in LINK.findall(lines[i])
            if (page.parent / target).resolve() == MEASURED
        }
        for i in block:
            for m in PAGE_FIGURE.finditer(lines[i]):
                unit = m[3] or m[4] or m[5]
                unit = {"seconds": "s"}.get(unit, unit.split()[-1])
                for number in filter(None, (m[1], m[2])):
                    if significant(number) < 3 and not ("." in number and linked):
                        continue
                    value, places = float(number.replace(",", "")), len(number.partition(".")[2])
                    same = [f for f in figures if f.unit == unit and abs(f.value - value) <= 0.5 * 10**-places + 1e-9]
                    if same:
                        f = min(same, key=lambda f: (f.anchor() not in linked, abs(f.value - value)))
                        link = f"{os.path.relpath(MEASURED, page.parent)}#{f.anchor()}"
                        says = (
                            f"repeats {f.value:g} {f.unit} of docs/benchmarks.md:{f.line} "
                            f"({f.column!r}, section {f.section!r}): link {link} instead"
                        )
                        found.append(Repeat(i + 1, m[0], says))
    return found


# Figures a hand-written page measured elsewhere that happen to round from a table's: (page, what it
# writes) -> where it was measured. Each must still be on its page (a test says so), so the list
# cannot outlive what it excuses.
ELSEWHERE = {
    ("docs/development/tests.md", "133 s"): "a cold `hack/node up` of three nodes, not a simulated start",
    **dict.fromkeys(
        (
            ("docs/user-guide/lost-nodes.md", "149-155 s"),
            ("docs/user-guide/lost-nodes.md", "152-157 s"),
            ("docs/user-guide/lost-nodes.md", "146-158 s"),
            ("docs/user-guide/lost-nodes.md", "147-156 s"),
            ("docs/user-guide/lost-nodes.md", "146-159 s"),
        ),
        "tests/e2e/cluster/test_nodes.py on the three real nodes, not the simulated cluster's kwok nodes",
    ),
}


def hand_written() -> list[Path]:
    pages = {p for pattern in PAGES for p in ROOT.glob(pattern)}
    return sorted(p for p in pages if p.relative_to(ROOT).as_posix() not in GENERATED)


def test_every_measured_column_has_a_unit_and_every_section_figures():
    """A new column of report.py's tables, unit-less in its header, is named in UNITS (or GIVEN),
    and a section whose tables this reads no figure from fails: else its figures could be copied
    unseen."""
    text = MEASURED.read_text()
    figures, unknown = measured(text)
    assert unknown == [], "docs/benchmarks.md: columns of no known unit, name each in UNITS (or GIVEN)"
    sections = {line[3:] for line in text.splitlines() if line.startswith("## ")}
    assert sections - {f.section for f in figures} == set(), "docs/benchmarks.md: sections with no figure read"


def test_no_page_repeats_a_measured_figure():
    figures, _ = measured(MEASURED.read_text())
    found = [
        f"{page.relative_to(ROOT)}:{where}"
        for page in hand_written()
        for where in repeats(page.read_text(), page, figures)
        if (page.relative_to(ROOT).as_posix(), where.text) not in ELSEWHERE
    ]
    if found:
        pytest.fail("figures copied from the generated docs/benchmarks.md:\n" + "\n".join(found), pytrace=False)


def test_each_figure_measured_elsewhere_is_still_on_its_page():
    gone = [f"{page}: {text!r}" for page, text in ELSEWHERE if text not in (ROOT / page).read_text()]
    assert gone == [], "ELSEWHERE names figures no longer on their pages: remove them"


GENERATED_PAGE = """## Thousands of tasks on a simulated cluster
| release | tasks | all Running s | etcd MB | (c) API req/task/min | vs 1 pod |
|---|---|---|---|---|---|
| MultiWorkerMirrored | 4096 | 212.76 | 1829 | 5.803 (45 s from +120 s) | +2.2 s (1.66x) |
| ParameterServer | 512 | 3.44 | 57 | 0.0 (60 s from +0 s) | +0.6 s (1.10x) |
"""
CASES = {
    # case: (a page's text, what the test reports there: [] for nothing)
    "a rounded figure": ("4096 tasks were all Running 213 s after the install.", ["'213 s'"]),
    "thousands with a comma": ("etcd held 1,829 MB.", ["'1,829 MB'"]),
    "a ratio from a cell's parentheses": ("It took 1.66x as long.", ["'1.66x'"]),
    "a range's end": ("A start took 200-213 seconds.", ["'200-213 seconds'"]),
    "a coarse figure beside a link": ("Its floor: 2.2 s ([Scale](benchmarks.md#scale)).", ["'2.2 s'"]),
    "a coarse figure, no link": ("A fresh install renders in 3.4 s.", []),
    "a coarse figure, its link in another paragraph": ("Renders in 3.4 s.\n\nSee [it](benchmarks.md).", []),
    "what a run was given": ("A 4096 s window; a 512 MB pod; 120 s after.", []),
    "another unit": ("It read 213 KB.", []),
    "a link to the summary page": ("Its floor: 2.2 s ([cost](user-guide/benchmarks.md)).", []),
    "code": ("```text\n[smoke  212.8s] done\n```\nRun `sleep 213 s` first.", []),
}


@pytest.mark.parametrize("case", CASES)
def test_a_repeated_figure_is_found_and_an_input_is_not(case):
    text, reported = CASES[case]
    figures, unknown = measured(GENERATED_PAGE)
    assert unknown == []
    found = repeats(text, ROOT / "docs" / "page.md", figures)
    assert [repr(f.text) for f in found] == reported, [str(f) for f in found]
