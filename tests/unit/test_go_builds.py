"""Every Go build of the tooling (`make setup`'s tools, the node's components) leaves the debug
information (DWARF) out at compile time: the linker's -w drops it anyway, and writing it cost 13 %
of a cold build's CPU (CONTRIBUTING.md, "The CI budget"). And every one passes -trimpath: builds
whose flags differ each compile Go's standard library again (~40 s of CPU for the 221 packages of
it these tools use, measured with an empty build cache). A build added without either fails here."""

from __future__ import annotations

import ast
import re

from tf_cluster import ROOT

BUILD_SH = ROOT / "hack" / "node" / "build.sh"
BOOTSTRAP = ROOT / "tooling" / "bootstrap.py"


def test_the_shell_and_python_builds_use_one_flag():
    sh = re.search(r"^NODWARF=(\S+)$", BUILD_SH.read_text(), re.M)
    py = re.search(r'^NO_DWARF = "([^"]+)"$', BOOTSTRAP.read_text(), re.M)
    assert sh and py, "NODWARF (hack/node/build.sh) or NO_DWARF (tooling/bootstrap.py) is gone"
    assert sh.group(1) == py.group(1) == "-gcflags=all=-dwarf=false"


def test_every_go_build_in_the_node_build_leaves_dwarf_out():
    lines = [
        (n, line)
        for n, line in enumerate(BUILD_SH.read_text().splitlines(), 1)
        if re.search(r"(^|[\s;&(])go (build|install) ", re.sub(r"\s#\s.*$", "", line))
        and not line.lstrip().startswith("#")
    ]
    assert len(lines) >= 7, lines  # Kubernetes, CoreDNS, local-path, pause, Argo CD, kwok, Cilium x2
    missing = [f"build.sh:{n}: {line.strip()}" for n, line in lines if '"$NODWARF"' not in line]
    assert not missing, missing
    untrimmed = [f"build.sh:{n}: {line.strip()}" for n, line in lines if " -trimpath " not in line]
    assert not untrimmed, untrimmed


def test_every_go_build_in_setup_leaves_dwarf_out():
    calls = [
        node
        for node in ast.walk(ast.parse(BOOTSTRAP.read_text()))
        if isinstance(node, ast.List)
        and len(node.elts) > 2
        and isinstance(node.elts[0], ast.Name)
        and node.elts[0].id == "go"
        and isinstance(node.elts[1], ast.Constant)
        and node.elts[1].value in ("build", "install")
    ]
    assert len(calls) >= 4, len(calls)  # Helm, the `go install` tools, the module builds, psscheck
    missing = [
        f"bootstrap.py:{c.lineno}"
        for c in calls
        if not any(isinstance(e, ast.Name) and e.id == "NO_DWARF" for e in c.elts)
    ]
    assert not missing, missing
    untrimmed = [
        f"bootstrap.py:{c.lineno}"
        for c in calls
        if not any(isinstance(e, ast.Constant) and e.value == "-trimpath" for e in c.elts)
    ]
    assert not untrimmed, untrimmed
