"""A test that needs an object the chart always renders fails when it is missing, never skips.

The only skips left are about the machine a test runs on (no root, no user namespaces, no docker,
no built image, no cluster), each listed here with why. A harness component `make check` builds
or installs uses `tests/needs.py` instead (skip here, fail in CI). A new skip site fails this test:
assert what the chart renders, or mark a harness component with `needs`; only a condition of the
machine joins the list.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

# file -> (number of skip sites, what they depend on): the machine, never the chart's output
ALLOWED = {
    "image/test_image.py": (1, "a built trainer image (make image; make test leaves it out)"),
    "tooling/test_from_tfjob.py": (2, "docker installed; an image in podman's store that is not the test's"),
    "launcher/test_exporter.py": (1, "promtool (make test installs it as root)"),
    "local/test_isolation.py": (5, "root, runuser, a Python user nobody may run, user namespaces"),
    "unit/test_shared_dir.py": (1, "root, to act as another uid"),
    "local/test_local_cluster.py": (1, "user namespaces for isolated tasks"),
    "local/test_third_party.py": (1, "user namespaces for isolated tasks"),
    "local/test_progress_files.py": (1, "user namespaces for isolated tasks"),
    "e2e/cluster/conftest.py": (1, "a cluster (make e2e brings one up)"),
    "needs.py": (1, "the harness's components, skipped outside CI only"),
}


def skip_sites(source: str) -> int:
    """Calls of pytest.skip and uses of pytest.mark.skip/skipif in a module."""
    count = 0
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in ("skip", "skipif"):
            base = node.value
            if (isinstance(base, ast.Name) and base.id == "pytest") or (
                isinstance(base, ast.Attribute) and base.attr == "mark"
            ):
                count += 1
    return count


def test_skips_depend_on_the_machine_only():
    found = Counter(
        {
            str(path.relative_to(TESTS)): n
            for path in TESTS.rglob("*.py")
            if "programs" not in path.parts and (n := skip_sites(path.read_text()))
        }
    )
    grown = {f: n for f, n in found.items() if n > ALLOWED.get(f, (0, ""))[0]}
    assert grown == {}, (
        "a new pytest.skip/skipif: a test of what the chart always renders asserts it instead, and a "
        f"harness component uses tests/needs.py (fails in CI); {grown}"
    )
    gone = {f: n for f, (n, _) in ALLOWED.items() if found.get(f, 0) < n}
    assert gone == {}, f"fewer skips than listed: lower or drop their entries (the list only shrinks): {gone}"


def test_a_skip_is_counted():
    source = (
        "import pytest\n"
        "pytestmark = pytest.mark.skipif(True, reason='x')\n"
        "def test_a():\n"
        "    if not []:\n"
        "        pytest.skip('no task container has a port named metrics yet')\n"
    )
    assert skip_sites(source) == 2
    assert skip_sites("import pytest\ndef test_a():\n    assert [1]\n") == 0
